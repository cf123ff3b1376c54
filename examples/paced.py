"""Pacing a third-party API: at most two runs at once, and every mail step shares the
named limit `mail` (flowctl limits set mail --rate 100/1m) with every other run."""

from flowctl import step, workflow


@step(limit="mail")
def send(user: str) -> str:
    return f"mail -> {user}"


@workflow("paced", concurrency=2)
def paced(ctx, user: str = "ana"):
    return ctx.step("send", send, user)
