"""Run lanes of a sweep against an ``httpx.MockTransport`` handler and collect their records."""

from __future__ import annotations

import asyncio
import math
import time

import httpx

from toolkit._sweep.lanes import LaneContext, run_lane


def lane_records(handler, attempts: int = 1, lanes: int = 1) -> list[dict]:
    """Every record of ``lanes`` lanes (indices 0, 1, ...) run one after another, ``attempts`` each;
    the secret ``sk-secret`` is registered for redaction."""
    records: list[dict] = []

    async def main():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            ctx = LaneContext(
                client=client,
                auth=None,
                chat_url="http://test/v1/chat/completions",
                body={"model": "m"},
                timeout_s=5,
                attempts=attempts,
                postprocess=None,
                slots=asyncio.Semaphore(1),
                secrets=("sk-secret",),
                on_record=records.append,
            )
            for index in range(lanes):
                await run_lane(
                    ctx,
                    index=index,
                    prompt="p",
                    messages=[{"role": "user", "content": "p"}],
                    keys={"in_flight": 1, "repeat": 1, "rate_rps": math.nan, "session": "s"},
                    first_attempt=1,
                    level_t0=time.perf_counter(),
                )

    asyncio.run(main())
    return records
