"""A price quote with a flaky pricing service: step retries with durable backoff,
and a deadline after which the quote is pointless.

    flowctl run examples/quote.py:quote -i item=book --deadline 15m --timeout 30s --max-attempts 5 --detach
"""

import random

from flowctl import RetryPolicy, step, workflow


class PricingUnavailable(Exception):
    pass


@step(retry=RetryPolicy.make(max_attempts=5, backoff="500ms", multiplier=2, max_backoff="10s"))
def fetch_price(item: str, fail_rate: float) -> float:
    if random.random() < fail_rate:
        raise PricingUnavailable(f"pricing service busy for {item!r}")
    return round(10 + len(item) * 1.5, 2)


@workflow("quote")
def quote(ctx, item: str = "book", fail_rate: float = 0.3):
    price = ctx.step("price", fetch_price, item, fail_rate)
    quote_id = ctx.uuid()
    return {"quote": quote_id, "item": item, "price": price, "quoted_at": ctx.now().isoformat()}
