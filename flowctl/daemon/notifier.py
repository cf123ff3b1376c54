"""Deliver the notification outbox: the daemon's side of `[notify]`.

At least once: a row is claimed for one try (due again after the try's time budget, or at
once when the claiming daemon is provably gone, so a daemon killed mid-delivery leaves it
to the next one), then settled in one transaction with
its timeline events. A channel that has had the notification is never tried again for it;
a failed one is retried with backoff (flowctl.notify.retry_delay) up to `tries` times.
Receivers can drop duplicates by the X-Flowctl-Delivery header (the outbox row's number).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import subprocess
import threading
from datetime import timedelta
from typing import Any

from flowctl.clock import Clock
from flowctl.errors import DatabaseError, DatabaseUnavailable
from flowctl.limits import one_line
from flowctl.model import Run
from flowctl.notify import (
    SIGNATURE_HEADER,
    NotifyConfig,
    effective,
    event_name,
    retry_delay,
    unwanted_endings,
    wanted,
)
from flowctl.store import Store
from flowctl.store.records import Notification

log = logging.getLogger(__name__)

CLAIM_MARGIN = 5.0  # seconds past a try's own time budget before another daemon retries it
PASS_EVERY = 0.25  # seconds between passes over the outbox ...
PASS_ROWS = 64  # ... of at most this many due rows; a full pass is followed by another at once
DROP_ROWS = 4096  # rows no channel wants, dropped in one statement per pass (as full: again)


class DeliveryError(Exception):
    """One channel did not take the notification; str() says why in one line."""


def signature(secret: str, body: bytes) -> str:
    """The X-Flowctl-Signature value: `sha256=` and the hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


class Notifier:
    def __init__(self, store: Store, clock: Clock, config: NotifyConfig | None, owner: str) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self.owner = owner
        # The last pass met a full batch of due rows: more may be due. The next pass starts
        # at once, so the outbox drains as fast as runs end (one pass of PASS_ROWS every
        # PASS_EVERY would drain 256 a second: a daemon ending more runs than that grew
        # the outbox without bound). Every pass moves each row it sees out of the due set
        # (dropped, delivered, or claimed with a later due time), so the loop ends.
        self.backlog = False

    def start(self, stop: threading.Event) -> threading.Thread:
        """Deliver on a thread of its own until `stop` is set: a slow receiver never holds
        up the daemon's claims or heartbeats. `flowctl daemon` runs one beside its loop; a
        one-run worker (`flowctl run --wait`) runs none and leaves the outbox to a daemon."""
        thread = threading.Thread(target=self._serve, args=(stop,), name="flowctl-notify")
        thread.daemon = True
        thread.start()
        return thread

    def _serve(self, stop: threading.Event) -> None:
        with self.store.own_writes():
            while not stop.is_set():
                try:
                    self.deliver_due()
                except DatabaseUnavailable as e:  # an outage: the daemon's loop says it once
                    log.debug("notification pass failed: %s", e)
                except DatabaseError as e:
                    log.warning("notification pass failed: %s", e)
                except Exception:
                    log.exception("notification pass failed")
                if not self.backlog:
                    self.clock.wait(stop, PASS_EVERY)

    def reclaim_orphans(self) -> int:
        """Rows held by a deliverer that is provably gone (killed mid-try) become due now,
        rather than after the try's time budget; returns how many."""
        from flowctl.ids import owner_is_dead

        now = self.clock.now()
        freed = 0
        for seq, owner in self.store.notification_claims(now):
            if owner != self.owner and owner_is_dead(owner):
                freed += int(self.store.release_notification(seq, owner, now))
        return freed

    def deliver_due(self) -> int:
        """One pass over the due outbox rows; returns how many tries were made."""
        self.reclaim_orphans()
        now = self.clock.now()
        # What no channel here can want goes first, in one statement (a daemon's own
        # completions write none: Store.leave_untold; dead and cancelled runs, and other
        # writers, do). The rest (an override, a wanted ending) are looked at one by one.
        dropped = self.store.drop_unwanted_notifications(
            unwanted_endings(self.config), now, DROP_ROWS
        )
        rows = self.store.due_notifications(now, limit=PASS_ROWS)
        self.backlog = len(rows) >= PASS_ROWS or dropped >= DROP_ROWS
        unwanted: list[int] = []
        tried = 0
        for row in rows:
            config = effective(self.config, row.override)
            channels = wanted(config, row.status, row.error_kind)
            if not channels:
                unwanted.append(row.seq)
                continue
            todo = [c for c in channels if c not in row.channels_done]
            budget = config.timeout * max(1, len(todo)) + CLAIM_MARGIN
            until = now + timedelta(seconds=budget)
            if not self.store.claim_notification(row.seq, now, until, self.owner):
                continue  # another daemon has it
            tried += 1
            self._try(row, config, todo)
        self.store.drop_notifications(unwanted)
        return tried

    def _try(self, row: Notification, config: NotifyConfig, todo: list[str]) -> None:
        run = self.store.get_run(row.run_id)
        event = event_name(row.status, row.error_kind)
        body = json.dumps(run.to_json(), separators=(",", ":")).encode("utf-8")
        attempt = row.tries + 1
        done = list(row.channels_done)
        failures: list[str] = []
        events: list[tuple[str, dict[str, Any]]] = []
        for channel in todo:
            try:
                if channel == "webhook":
                    self._webhook(config, run, event, row.seq, body)
                else:
                    self._command(config, run, event, body)
            except DeliveryError as e:
                failures.append(f"{channel}: {e}")
                events.append(
                    (
                        "notify failed",
                        {"channel": channel, "event": event, "try": attempt, "error": str(e)},
                    )
                )
                continue
            done.append(channel)
            events.append(("notified", {"channel": channel, "event": event, "try": attempt}))
        now = self.clock.now()
        retry_at = None
        if failures and attempt < config.tries:
            retry_at = now + timedelta(seconds=retry_delay(attempt))
            events.append(
                (
                    "notify retry",
                    {"try": attempt + 1, "at": retry_at.isoformat(timespec="microseconds")},
                )
            )
        elif failures:
            events.append(("notify gave up", {"tries": attempt, "error": failures[-1]}))
            log.warning(
                "run %s: notification gave up after %d tries: %s", run.run_id, attempt, failures[-1]
            )
        self.store.settle_notification(
            row.seq,
            row.run_id,
            now,
            done=done,
            error="; ".join(failures) if failures else None,
            retry_at=retry_at,
            events=events,
        )

    def _webhook(self, config: NotifyConfig, run: Run, event: str, seq: int, body: bytes) -> None:
        if config.webhook is None:
            raise DeliveryError("no webhook is configured")
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "flowctl",
            "X-Flowctl-Event": event,
            "X-Flowctl-Run": run.run_id,
            "X-Flowctl-Delivery": str(seq),
        }
        if config.secret:
            headers[SIGNATURE_HEADER] = signature(config.secret, body)
        import urllib.error  # only a daemon with a webhook to call pays for loading these
        import urllib.request

        request = urllib.request.Request(config.webhook, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=config.timeout) as response:
                code = int(response.status)
        except urllib.error.HTTPError as e:
            raise DeliveryError(f"{config.webhook} answered HTTP {e.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise DeliveryError(f"{config.webhook}: {one_line(str(reason))}") from None
        if not 200 <= code < 300:
            raise DeliveryError(f"{config.webhook} answered HTTP {code}")

    def _command(self, config: NotifyConfig, run: Run, event: str, body: bytes) -> None:
        if config.command is None:
            raise DeliveryError("no command is configured")
        env = {
            **os.environ,
            "FLOWCTL_RUN_ID": run.run_id,
            "FLOWCTL_STATUS": str(run.status),
            "FLOWCTL_EVENT": event,
            "FLOWCTL_WORKFLOW": run.workflow,
        }
        try:
            done = subprocess.run(
                list(config.command),
                input=body,
                env=env,
                capture_output=True,
                timeout=config.timeout,
                start_new_session=True,  # a Ctrl-C to the daemon's group does not hit it
                check=False,
            )
        except FileNotFoundError:
            raise DeliveryError(f"command {config.command[0]!r} not found") from None
        except subprocess.TimeoutExpired:
            raise DeliveryError(f"command did not finish within {config.timeout:g}s") from None
        except OSError as e:
            raise DeliveryError(f"command {config.command[0]!r}: {e.strerror}") from None
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
            raise DeliveryError(
                f"command exited with code {done.returncode}"
                + (f": {one_line(tail[0])}" if tail else "")
            )
