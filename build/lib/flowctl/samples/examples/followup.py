"""Trial follow-up: send the welcome mail, wait up to 72 hours for a reply,
send the follow-up only if none came.

    flowctl run examples/followup.py:followup -i user=42 --detach
    flowctl signal RUN replied --data '{"text": "thanks!"}'     # before 72h: no follow-up
"""

from flowctl import workflow


def send(user: str, template: str) -> str:
    # A real workflow would call a mail API here; the result is checkpointed.
    return f"sent {template} to {user}"


@workflow("followup")
def followup(ctx, user: str = "42"):
    ctx.step("welcome", send, user, "welcome")
    reply = ctx.wait_signal("replied", timeout="72h", default=None)
    if reply is not None:
        return {"user": user, "followed_up": False, "reply": reply}
    ctx.step("follow-up", send, user, "follow-up")
    return {"user": user, "followed_up": True}
