"""Prometheus text exposition of a database's state, for `GET /metrics` and
`flowctl status --prometheus`.

Read at scrape time from the database (the daemon, the CLI and `serve` are separate
processes; the file is the one truth), with prometheus-client rendering the text. Counters
are counts of recorded facts (claims, reclaims, wakes, steps), so they only go up while
runs are kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from flowctl.ids import owner_alive
from flowctl.model import RunStatus
from flowctl.store import Store
from flowctl.store.records import Histogram, MetricsSnapshot

LATENESS_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)
STEP_BOUNDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 3600.0)
NOTIFY_STATES = ("pending", "delivered", "failed")


def _buckets(h: Histogram) -> list[tuple[str, float]]:
    return [(repr(b), float(n)) for b, n in zip(h.bounds, h.cumulative, strict=True)] + [
        ("+Inf", float(h.count))
    ]


class _Collector:
    """One scrape: a snapshot of the store turned into metric families."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Any]:
        snap = self.store.metrics_snapshot(LATENESS_BOUNDS, STEP_BOUNDS)
        yield from _runs(snap)
        yield from _histograms(snap)
        claims = CounterMetricFamily("flowctl_claims", "Runs claimed by a worker.")
        claims.add_metric([], snap.claims)
        yield claims
        reclaims = CounterMetricFamily(
            "flowctl_reclaims", "Runs reclaimed from a worker whose lease lapsed or who died."
        )
        reclaims.add_metric([], snap.reclaims)
        yield reclaims
        yield from _daemons(snap)
        outbox = dict(snap.notifications)
        notes = GaugeMetricFamily(
            "flowctl_notifications", "Notification outbox rows by state.", labels=["state"]
        )
        for state in NOTIFY_STATES:
            notes.add_metric([state], outbox.get(state, 0))
        yield notes


def _runs(snap: MetricsSnapshot) -> list[Any]:
    """Runs by status and workflow, and by status alone (every status, 0 included)."""
    runs = GaugeMetricFamily(
        "flowctl_runs", "Runs by status and workflow.", labels=["status", "workflow"]
    )
    for status, workflow, n in snap.runs:
        runs.add_metric([status, workflow], n)
    totals = GaugeMetricFamily("flowctl_runs_by_status", "Runs by status.", labels=["status"])
    per_status = {s.value: 0 for s in RunStatus}
    for status, _, n in snap.runs:
        per_status[status] = per_status.get(status, 0) + n
    for status, n in per_status.items():
        totals.add_metric([status], n)
    return [runs, totals]


def _histograms(snap: MetricsSnapshot) -> list[Any]:
    """How late timers woke, and how long steps took per workflow."""
    late = HistogramMetricFamily(
        "flowctl_wake_lateness_seconds", "How late timers woke (sleeps, retries, starts)."
    )
    late.add_metric([], _buckets(snap.wake_lateness), snap.wake_lateness.total)
    steps = HistogramMetricFamily(
        "flowctl_step_duration_seconds", "Durations of journaled steps.", labels=["workflow"]
    )
    for workflow, h in snap.step_durations:
        steps.add_metric([workflow], _buckets(h), h.total)
    return [late, steps]


def _daemons(snap: MetricsSnapshot) -> list[Any]:
    """Each registered daemon: alive or not, the leases it holds; and how many are alive."""
    up = GaugeMetricFamily(
        "flowctl_daemon_up",
        "1 for each registered daemon whose process is alive, else 0.",
        labels=["owner", "host", "pid"],
    )
    held = GaugeMetricFamily(
        "flowctl_daemon_leases_held",
        "Runs each daemon holds a lease on.",
        labels=["owner", "host", "pid"],
    )
    alive = 0
    for info, n in snap.daemons:
        is_up = owner_alive(info.owner)
        alive += int(is_up)
        labels = [info.owner, info.host, str(info.pid)]
        up.add_metric(labels, 1 if is_up else 0)
        held.add_metric(labels, n)
    daemons = GaugeMetricFamily("flowctl_daemons_up", "Live daemons on this database.")
    daemons.add_metric([], alive)
    return [up, held, daemons]


def render(store: Store) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of `store`."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(store))
    return bytes(generate_latest(registry))
