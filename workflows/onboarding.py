"""Onboarding: welcome now, tips after a day, a check-in after a week.

flowctl run workflows/onboarding.py:onboarding -i user=42    # exits; the run sleeps 24h
flowctl run onboarding -i user=42                            # the same, found by name
"""

from pathlib import Path

from flowctl import workflow

OUTBOX = Path(__file__).resolve().parent.parent / ".flowctl" / "outbox.log"


def send_mail(user: str, template: str) -> dict:
    """Stand-in for a mail API: appends to .flowctl/outbox.log so you can see what was sent."""
    OUTBOX.parent.mkdir(parents=True, exist_ok=True)
    with OUTBOX.open("a") as f:
        f.write(f"{template} -> user {user}\n")
    return {"user": user, "template": template}


@workflow("onboarding")
def onboarding(ctx, user: str):
    ctx.step("welcome", send_mail, user, "welcome")  # runs once: its result is journaled
    ctx.sleep("24h")  # durable: survives crashes and deploys, and holds no process
    ctx.step("tips", send_mail, user, "tips")
    ctx.sleep("6d")
    ctx.step("check-in", send_mail, user, "check-in")
    return {"user": user, "mails": 3}
