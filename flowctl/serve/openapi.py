"""/openapi.json: the API as OpenAPI 3.1, written out (it is small), checked by the tests
against the app's routes so the two cannot drift."""

from __future__ import annotations

from typing import Any

from flowctl.limits import MAX_COUNT, SHOW_STEPS
from flowctl.model import RunStatus

_ERROR = {"$ref": "#/components/schemas/Error"}
_RUN = {"$ref": "#/components/schemas/Run"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "bad JSON or arguments",
        401: "missing or wrong bearer token",
        404: "no run matches",
        409: "the run's status refuses the action",
        413: "body over 1 MiB",
        503: "the database cannot be used right now",
    }
    return {str(c): _json(_ERROR, text[c]) for c in codes}


_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "Run id or unique prefix.",
    "schema": {"type": "string"},
}
_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "Signal name; names beginning with '_' are reserved.",
    "schema": {"type": "string"},
}
_PAYLOAD = {
    "required": False,
    "description": "The signal's payload: any JSON value (an empty body is null).",
    "content": {"application/json": {"schema": {}}},
}


def _action(verb: str, summary: str) -> dict[str, Any]:
    """An action on one run; its body is optional: empty, or a JSON object (cancel's may
    give a `reason`, recorded in the timeline; redrive's a new `deadline`, or `no_deadline`,
    which a run past its own deadline needs; the other actions take no fields)."""
    fields: dict[str, Any] = {}
    if verb == "cancel":
        fields = {"reason": {"type": "string", "minLength": 1, "maxLength": 1000}}
    elif verb == "redrive":
        fields = {
            "deadline": {
                "oneOf": [{"type": "string"}, {"type": "number"}],
                "description": "A new deadline, as `start` takes it: a duration or an ISO time.",
            },
            "no_deadline": {"type": "boolean", "description": "Redrive with no deadline."},
        }
    return {
        "post": {
            "operationId": f"{verb}Run",
            "summary": summary,
            "parameters": [_ID],
            "requestBody": {
                "required": False,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": fields,
                            "additionalProperties": False,
                        }
                    }
                },
            },
            "responses": {
                "200": _json(
                    {"type": "object", "properties": {"run": _RUN}, "required": ["run"]},
                    "the run after the action",
                ),
                **_errors(400, 401, 404, 409, 503),
            },
        }
    }


def spec() -> dict[str, Any]:
    """The OpenAPI document served at /openapi.json."""
    duration = {
        "oneOf": [{"type": "string"}, {"type": "number"}],
        "description": 'A duration ("15m", "2h", "7d") or a number of seconds.',
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "flowctl",
            "version": "1",
            "description": "Start, read and signal flowctl runs. Every endpoint but /healthz"
            " needs `Authorization: Bearer TOKEN`.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "properties": {"error": {"type": "string"}},
                    "required": ["error"],
                },
                "Run": {
                    "type": "object",
                    "description": "A run as `flowctl ls --json` prints it; secret inputs"
                    " are shown as ***.",
                    "properties": {
                        "id": {"type": "string"},
                        "workflow": {"type": "string"},
                        "status": {"type": "string", "enum": [s.value for s in RunStatus]},
                        "input": {},
                        "key": {"type": ["string", "null"]},
                    },
                    "required": ["id", "workflow", "status"],
                },
                "RunDetail": {
                    "type": "object",
                    "description": "A run as `flowctl show --json` prints it.",
                    "properties": {
                        "run": _RUN,
                        "checkpoints": {"type": "array", "items": {"type": "object"}},
                        "checkpoints_total": {"type": "integer"},
                        "timeline": {"type": "array", "items": {"type": "object"}},
                        "timeline_total": {"type": "integer"},
                        "page": {
                            "type": "object",
                            "description": "The newest `steps` checkpoints and timeline"
                            " events after the `skip` newest.",
                        },
                    },
                    "required": ["run", "checkpoints", "timeline"],
                },
                "StartRequest": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["target"],
                    "properties": {
                        "target": {
                            "type": "string",
                            "description": "A workflow name, or file.py:function or a .yaml"
                            " file under the project root.",
                        },
                        "input": {"type": "object"},
                        "key": {"type": "string", "description": "Idempotency key."},
                        "in": duration,
                        "at": {"type": "string", "description": "ISO-8601 start time, or now."},
                        "deadline": duration | {"description": "A duration or an ISO time."},
                        "timeout": duration,
                        "max_attempts": {"type": "integer", "minimum": 1},
                        "priority": {
                            "type": "integer",
                            "description": "Higher first among due runs (default 0).",
                        },
                    },
                },
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "summary": "Liveness; needs no token.",
                    "security": [],
                    "responses": {"200": _json({"type": "object"}, "serving")},
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document.",
                    "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1"), **_errors(401)},
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus text exposition.",
                    "responses": {
                        "200": {
                            "description": "metrics",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        **_errors(401, 503),
                    },
                }
            },
            "/runs": {
                "post": {
                    "operationId": "startRun",
                    "summary": "Queue a run; a known key returns the run it started (200).",
                    "parameters": [
                        {
                            "name": "traceparent",
                            "in": "header",
                            "required": False,
                            "description": "W3C Trace Context: the run's spans join this trace.",
                            "schema": {"type": "string"},
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/StartRequest"}
                            }
                        },
                    },
                    "responses": {
                        "201": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "id": {"type": "string"},
                                    "created": {"type": "boolean"},
                                    "run": _RUN,
                                },
                                "required": ["id", "created"],
                            },
                            "queued",
                        ),
                        "200": _json({"type": "object"}, "the key matched an existing run"),
                        **_errors(400, 401, 413, 503),
                    },
                },
                "get": {
                    "operationId": "listRuns",
                    "summary": "Runs, newest first.",
                    "parameters": [
                        {
                            "name": "status",
                            "in": "query",
                            "schema": {"type": "string"},
                            "description": "A status, or several comma-separated.",
                        },
                        {"name": "workflow", "in": "query", "schema": {"type": "string"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                        },
                        {
                            "name": "offset",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0},
                        },
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {"runs": {"type": "array", "items": _RUN}},
                                "required": ["runs"],
                            },
                            "runs",
                        ),
                        **_errors(400, 401, 503),
                    },
                },
            },
            "/runs/{id}": {
                "get": {
                    "operationId": "getRun",
                    "summary": "One run with a page of its checkpoints and timeline.",
                    "parameters": [
                        _ID,
                        {
                            "name": "steps",
                            "in": "query",
                            "description": "Checkpoints and timeline events per page, the"
                            f" newest of each (default {SHOW_STEPS}).",
                            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
                        },
                        {
                            "name": "skip",
                            "in": "query",
                            "description": "Leave out this many of the newest first.",
                            "schema": {"type": "integer", "minimum": 0, "maximum": MAX_COUNT},
                        },
                    ],
                    "responses": {
                        "200": _json({"$ref": "#/components/schemas/RunDetail"}, "the run"),
                        **_errors(400, 401, 404, 503),
                    },
                }
            },
            "/runs/{id}/signals/{name}": {
                "post": {
                    "operationId": "signalRun",
                    "summary": "Send a signal to a run; it is buffered until the run waits for it.",
                    "parameters": [_ID, _NAME],
                    "requestBody": _PAYLOAD,
                    "responses": {
                        "202": _json({"type": "object"}, "buffered"),
                        **_errors(400, 401, 404, 409, 413, 503),
                    },
                }
            },
            "/signals/{name}": {
                "post": {
                    "operationId": "signalByKey",
                    "summary": "Send a signal to the one active run with idempotency key `key`.",
                    "parameters": [
                        _NAME,
                        {
                            "name": "key",
                            "in": "query",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                    ],
                    "requestBody": _PAYLOAD,
                    "responses": {
                        "202": _json({"type": "object"}, "buffered"),
                        **_errors(400, 401, 404, 409, 413, 503),
                    },
                }
            },
            "/runs/{id}/cancel": _action(
                "cancel", "Cancel a run (a running one at its next heartbeat)."
            ),
            "/runs/{id}/redrive": _action(
                "redrive", "Give a dead or cancelled run a fresh attempt budget."
            ),
            "/runs/{id}/pause": _action("pause", "Pause a run."),
            "/runs/{id}/resume": _action("resume", "Resume a paused run."),
            "/runs/{id}/wake": _action("wake", "Make a sleeping or queued run due now."),
        },
    }
