"""The smallest real workflow: two steps around a durable 2-second sleep."""

from flowctl import workflow


def greet(name: str) -> str:
    return f"hello, {name}"


def shout(text: str) -> str:
    return text.upper() + "!"


@workflow("hello")
def hello(ctx, name: str = "world"):
    greeting = ctx.step("greet", greet, name)
    ctx.sleep("2s")  # durable: kill the process now and the run still wakes on time
    loud = ctx.step("shout", shout, greeting)
    return {"greeting": greeting, "loud": loud}
