"""Fan-out: check many sites at once, each check a checkpointed branch of its own.

flowctl run fanout                                       # three sites, checked concurrently
flowctl run fanout -i 'sites:=["a.example", "b.example"]'
"""

import asyncio

from flowctl import RetryPolicy, step, workflow


@step(retry=RetryPolicy.make(max_attempts=3, backoff="2s"))  # each site retries on its own
async def check(site: str) -> dict:
    await asyncio.sleep(0.1)  # stand-in for an HTTP call (an httpx.AsyncClient get)
    return {"site": site, "up": True}


@workflow("fanout")
def fanout(ctx, sites: list | None = None):
    sites = sites or ["a.example", "b.example", "c.example"]
    # One step per site, named check[0], check[1], ...: all run at once (at most 10),
    # each result journaled as it arrives; a crash or a retry runs only the unfinished.
    results = ctx.map("check", check, sites, max_concurrency=10)
    up = [r["site"] for r in results if r["up"]]
    return {"checked": len(results), "up": up}
