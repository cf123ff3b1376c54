"""The ASGI application: routes, and the handlers that turn any failure into `{error}`."""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flowctl.serve import routes
from flowctl.serve.routes import Served, error_response

log = logging.getLogger(__name__)


def build_app(served: Served) -> Starlette:
    """One Starlette app over `served`; every route is in /openapi.json."""
    table = [
        Route("/healthz", routes.healthz, methods=["GET"]),
        Route("/openapi.json", routes.openapi, methods=["GET"]),
        Route("/metrics", routes.metrics, methods=["GET"]),
        Route("/runs", routes.create_run, methods=["POST"]),
        Route("/runs", routes.list_runs, methods=["GET"]),
        Route("/runs/{id}", routes.get_run, methods=["GET"]),
        Route("/runs/{id}/signals/{name}", routes.signal_run, methods=["POST"]),
        Route("/signals/{name}", routes.signal_key, methods=["POST"]),
        *(
            Route(f"/runs/{{id}}/{action}", routes.action(action), methods=["POST"])
            for action in routes.ACTIONS
        ),
    ]
    app = Starlette(
        routes=table,
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    # No redirect from "/runs/" to "/runs": an empty run id is a 404 like any unknown path,
    # and a client never gets a 307 that replays its body elsewhere (found by the fuzz test).
    app.router.redirect_slashes = False
    app.state.served = served
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (unknown path 404, wrong method 405) as `{error}`."""
    if not isinstance(exc, HTTPException):
        return await _internal_error(request, exc)
    if exc.status_code == 404:
        return error_response(404, f"no such endpoint: {request.method} {request.url.path}")
    if exc.status_code == 405:
        allow = _allowed(request)
        reply = error_response(
            405,
            f"{request.method} is not allowed on {request.url.path}"
            + (f": use {allow}" if allow else ""),
        )
        if allow:
            reply.headers["Allow"] = allow  # RFC 9110: a 405 says which methods are allowed
        return reply
    return error_response(exc.status_code, str(exc.detail))


def _allowed(request: Request) -> str:
    """Every method some route serves at this path: Starlette's own 405 names only the
    first route that matched the path (POST for /runs, which GET serves too)."""
    from starlette.routing import Match, Route

    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Route) and route.matches(request.scope)[0] is not Match.NONE:
            methods |= set(route.methods or ())
    return ", ".join(sorted(methods))


async def _internal_error(request: Request, exc: Exception) -> Response:
    """A bug: logged with its traceback on the server, never shown to the client."""
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal error; the server log has the details")
