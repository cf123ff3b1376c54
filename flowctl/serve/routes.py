"""The endpoints: each parses the request, calls one `flowctl.ops` function, renders JSON.

They run the (blocking) ops in Starlette's thread pool, so a slow SQLite write never stalls
the event loop. Validation happens before any write, exactly as in the CLI, so a refused
request (401, 400, 404, 409, 413) has written nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse as _StarletteJSON
from starlette.responses import Response

from flowctl import ops
from flowctl.clock import Clock
from flowctl.errors import FlowctlError, UnknownWorkflowError, UsageError
from flowctl.limits import MAX_COUNT, MAX_KEY, SHOW_STEPS, check_utf8, loads_json, one_line
from flowctl.runtime.targets import YAML_SUFFIXES
from flowctl.serve.auth import token_matches
from flowctl.serve.errors import MAX_BODY, HttpError, status_for
from flowctl.store import Store

log = logging.getLogger(__name__)

ACTOR = "serve"  # `by` in the timeline of actions taken over HTTP
START_FIELDS = (
    "target",
    "input",
    "key",
    "in",
    "at",
    "deadline",
    "timeout",
    "max_attempts",
    "priority",
)
MAX_LIST = 1000


@dataclass
class Served:
    """What every handler needs: the store, the clock, the token (None: --no-auth) and the
    project root that relative workflow targets resolve against."""

    store: Store
    clock: Clock
    token: str | None
    root: Path
    workflows_dir: Path
    metrics: Callable[[], bytes]


def served(request: Request) -> Served:
    value = request.app.state.served
    if not isinstance(value, Served):
        raise RuntimeError("the app was built without its Served state")
    return value


class JSONResponse(_StarletteJSON):
    """JSON with every non-ASCII character escaped: a stored string holding a lone
    surrogate (written before such input was refused) is still sent, as `\\ud800`,
    where UTF-8 encoding would fail and turn one bad run into a 500 for every listing."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_response(status: int, message: str) -> JSONResponse:
    message = one_line(message)  # a quoted value may hold a newline; the error never does
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def field_name(field: str) -> str:
    """A field as the API spells it: as the body field or query parameter it is."""
    return field


def authorised(request: Request) -> bool:
    token = served(request).token
    return token is None or token_matches(request.headers.get("authorization"), token)


def unauthorised() -> JSONResponse:
    return error_response(401, "missing or wrong bearer token: send Authorization: Bearer TOKEN")


async def call(request: Request, op: Callable[[], Any], status: int = 200) -> Response:
    """Authorise, run `op` in the thread pool, and map its result or error to a response."""
    if not authorised(request):
        return unauthorised()
    try:
        result = await run_in_threadpool(op)
    except HttpError as e:
        return error_response(e.status, e.message)
    except UsageError as e:
        return error_response(status_for(e), e.spelled(field_name))
    except FlowctlError as e:
        return error_response(status_for(e), str(e))
    except (OverflowError, RecursionError) as e:
        return error_response(400, f"a value is out of range: {type(e).__name__}")
    if isinstance(result, Response):
        return result
    return JSONResponse(result, status_code=status)


async def read_body(request: Request) -> bytes:
    """The body, refused with 413 past MAX_BODY whether or not Content-Length says so."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise HttpError(413, f"the request body is over {MAX_BODY} bytes (1 MiB)")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise HttpError(413, f"the request body is over {MAX_BODY} bytes (1 MiB)")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json_body(raw: bytes, what: str, *, empty: Any = None) -> Any:
    if not raw.strip():
        return empty
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} is not UTF-8 text") from None
    return loads_json(check_utf8(text, what), what)


def _query_int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{name} must be an integer from {lo} to {hi}, got {text!r}") from None
    if not lo <= value <= hi:
        raise UsageError(f"{name} must be an integer from {lo} to {hi}, got {value}")
    return value


# ---------------------------------------------------------------------------
# Starting runs


def check_target(target: Any, root: Path) -> str:
    """A workflow name, or a .py:function / .yaml file under the project root.

    Module targets (`pkg.mod:fn`) and files outside the root are refused over HTTP: loading
    a target imports it, and a token is not meant to be a way to import any code on the
    machine. The CLI, run by someone with a shell, keeps every form.
    """
    if not isinstance(target, str) or not target.strip():
        raise UsageError("target must be a workflow name, a file.py:function or a .yaml file")
    text = target.strip()
    path_part: str | None = None
    if text.endswith(YAML_SUFFIXES):
        path_part = text
    elif ":" in text:
        left = text.rpartition(":")[0]
        if not (left.endswith(".py") or "/" in left):
            raise UsageError(
                f"target {text!r} is a module target; over HTTP give a workflow name, or a"
                " file.py:function or .yaml file under the project root"
            )
        path_part = left
    if path_part is not None:
        resolved = (root / path_part).resolve()
        if not resolved.is_relative_to(root.resolve()):
            raise UsageError(
                f"target {text!r} is outside the project root {root}; give a path under it"
            )
    return text


def start_run(s: Served, body: Any, traceparent: str | None = None) -> JSONResponse:
    """POST /runs: queue a run; a W3C `traceparent` header puts it in the caller's trace."""
    if not isinstance(body, dict):
        raise UsageError(
            'the body must be a JSON object like {"target": "trial-followup", "input": {"user": 42}}'
        )
    unknown = sorted(set(body) - set(START_FIELDS))
    if unknown:
        raise UsageError(f"unknown field {unknown[0]!r}; accepted: {', '.join(START_FIELDS)}")
    target = check_target(body.get("target"), s.root)
    inputs = body.get("input", {})
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict):
        raise UsageError('input must be a JSON object like {"user": 42}')
    options = ops.start_options(
        s.clock,
        delay=body.get("in"),
        at=body.get("at"),
        deadline=body.get("deadline"),
        timeout=body.get("timeout"),
        max_attempts=body.get("max_attempts"),
        priority=body.get("priority"),
    )
    try:
        started = ops.start(
            s.store,
            target,
            inputs,
            clock=s.clock,
            options=options,
            key=body.get("key"),
            workflows_dir=s.workflows_dir,
            cwd=str(s.root),
            traceparent=traceparent,
        )
    except UnknownWorkflowError:
        # The CLI's hint lists module:function, which HTTP refuses (check_target).
        raise UnknownWorkflowError(
            f"unknown workflow {target!r}: give a workflow name from {s.workflows_dir},"
            " or a file.py:function or .yaml file under the project root"
        ) from None
    return JSONResponse(
        {"id": started.run.run_id, "created": started.created, "run": started.run.to_json()},
        status_code=201 if started.created else 200,
    )


# ---------------------------------------------------------------------------
# Handlers


async def healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


async def openapi(request: Request) -> Response:
    from flowctl.serve.openapi import spec

    return await call(request, spec)


async def metrics(request: Request) -> Response:
    s = served(request)

    def render() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(s.metrics(), media_type=CONTENT_TYPE_LATEST)

    return await call(request, render)


async def create_run(request: Request) -> Response:
    s = served(request)
    if not authorised(request):
        return unauthorised()  # before the body is read
    try:
        raw = await read_body(request)
    except HttpError as e:
        return error_response(e.status, e.message)
    return await call(
        request,
        lambda: start_run(s, parse_json_body(raw, "the body"), request.headers.get("traceparent")),
    )


async def list_runs(request: Request) -> Response:
    s = served(request)

    def op() -> Any:
        q = request.query_params
        unknown = sorted(set(q) - {"status", "workflow", "limit", "offset"})
        if unknown:
            raise UsageError(
                f"unknown query parameter {unknown[0]!r}; accepted: status, workflow, limit, offset"
            )
        statuses = q.getlist("status")
        runs = ops.list_runs(
            s.store,
            statuses=statuses or None,
            workflow=q.get("workflow"),
            limit=_query_int(request, "limit", 50, 1, MAX_LIST),
            offset=_query_int(request, "offset", 0, 0, MAX_COUNT),
        )
        return {"runs": [r.to_json() for r in runs]}

    return await call(request, op)


async def get_run(request: Request) -> Response:
    s = served(request)
    ref = request.path_params["id"]

    def op() -> dict[str, Any]:
        unknown = sorted(set(request.query_params) - {"steps", "skip"})
        if unknown:
            raise UsageError(f"unknown query parameter {unknown[0]!r}; accepted: steps, skip")
        # A page of checkpoints and timeline events (the newest `steps` after `skip`), as
        # `flowctl show --json`: a 100,000-step run is never read whole.
        steps = _query_int(request, "steps", SHOW_STEPS, 1, MAX_COUNT)
        skip = _query_int(request, "skip", 0, 0, MAX_COUNT)
        return ops.show_run(s.store, ref, clock=s.clock, steps=steps, skip=skip).to_json()

    return await call(request, op)


async def signal_run(request: Request) -> Response:
    return await _signal(request, key=None)


async def signal_key(request: Request) -> Response:
    key = request.query_params.get("key")
    if not key:
        return await call(request, _missing_key)
    return await _signal(request, key=key)


def _missing_key() -> None:
    raise UsageError("POST /signals/{name} needs ?key=KEY, the run's idempotency key")


async def _signal(request: Request, *, key: str | None) -> Response:
    s = served(request)
    if not authorised(request):
        return unauthorised()
    name = request.path_params["name"]
    try:
        raw = await read_body(request)
    except HttpError as e:
        return error_response(e.status, e.message)

    def op() -> Any:
        payload = parse_json_body(raw, "the signal payload")
        if key is not None:
            run = ops.send_signal_by_key(s.store, key, name, payload, clock=s.clock)
        else:
            run = ops.send_signal(s.store, request.path_params["id"], name, payload, clock=s.clock)
        return {"id": run.run_id, "signal": name, "status": str(run.status)}

    return await call(request, op, status=202)


def action(name: str) -> Callable[[Request], Any]:
    acts: dict[str, Callable[..., Any]] = {
        "cancel": ops.cancel,
        "redrive": ops.redrive,
        "pause": ops.pause,
        "resume": ops.resume,
        "wake": ops.wake_now,
    }
    act = acts[name]

    async def handler(request: Request) -> Response:
        s = served(request)
        if not authorised(request):
            return unauthorised()  # before the body is read
        ref = request.path_params["id"]
        try:
            raw = await read_body(request)
        except HttpError as e:
            return error_response(e.status, e.message)

        def op() -> dict[str, Any]:
            extra = _action_options(name, raw)
            return {"run": act(s.store, ref, clock=s.clock, by=ACTOR, **extra).to_json()}

        return await call(request, op)

    handler.__name__ = f"{name}_run"
    return handler


ACTIONS = ("cancel", "redrive", "pause", "resume", "wake")
_ACTION_FIELDS = {"cancel": ("reason",), "redrive": ("deadline", "no_deadline")}


def _action_options(name: str, raw: bytes) -> dict[str, Any]:
    """An action's optional body: nothing, or a JSON object; cancel takes {"reason": text}
    (recorded as `flowctl cancel --reason` records it), redrive {"deadline": ...} or
    {"no_deadline": true} (checked by ops, as `redrive --deadline` is), the others no fields."""
    if not raw.strip():
        return {}
    body = parse_json_body(raw, "the body")
    if not isinstance(body, dict):
        raise UsageError(f"the body of POST /runs/{{id}}/{name} must be a JSON object or empty")
    accepted = _ACTION_FIELDS.get(name, ())
    unknown = sorted(set(body) - set(accepted))
    if unknown:
        takes = f"accepted: {', '.join(accepted)}" if accepted else "it takes no fields"
        raise UsageError(f"unknown field {unknown[0]!r} for {name}; {takes}")
    if name == "redrive":
        return dict(body)
    reason = body.get("reason")
    if reason is None:
        return {}
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_KEY:
        raise UsageError(f"reason must be non-empty text of at most {MAX_KEY:,} characters")
    return {"reason": reason}
