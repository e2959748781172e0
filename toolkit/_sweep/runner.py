"""Running a sweep's plan: probing the server, running each level's lanes, scraping /metrics, writing files."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
import uuid
import warnings
from typing import Any

import httpx
import pandas as pd
from tqdm.auto import tqdm

from toolkit._queueing.arrivals import arrival_offsets_s
from toolkit._sweep.files import LaneLog
from toolkit._sweep.lanes import LaneContext, run_lane
from toolkit._sweep.levels import RUN_COLUMNS, summarize
from toolkit._sweep.metrics import Delta, Snapshot, delta, scrape_snapshot
from toolkit._sweep.outdir import OutDir
from toolkit._sweep.plan import _Level, _Plan, _same_rate
from toolkit._sweep.records import LANE_COLUMNS
from toolkit._sweep.result import SweepResult, from_runs

__all__: list[str] = []


NAN = math.nan


_METRICS_TIMEOUT_S = 10.0


class _Runner:
    """Runs the levels of one sweep, writing records and rows as they finish."""

    def __init__(self, plan: _Plan, client: httpx.AsyncClient, deadline_at: float = math.inf) -> None:
        self.plan = plan
        self.client = client
        self.session = uuid.uuid4().hex[:12]
        self.log = LaneLog(plan.out_dir, plan.secrets)
        self.records: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.stopped = ""
        self.nonce = uuid.uuid4().hex[:8]
        self.out = OutDir(plan.out_dir, plan.params, plan.secrets, self.session)
        self.loop_deadline = deadline_at
        self.ctx = LaneContext(
            client=client,
            auth=plan.auth,
            chat_url=plan.chat_url,
            body={
                "model": plan.model,
                "max_tokens": plan.max_tokens,
                **plan.extra_body,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            timeout_s=plan.timeout_s,
            attempts=plan.attempts,
            postprocess=plan.postprocess,
            slots=asyncio.Semaphore(plan.slots),
            secrets=plan.secrets,
            on_record=self._keep,
            deadline=self.loop_deadline,
            deadline_text=f"cancelled: {self._deadline_text()}",
        )
        self.previous_runs: pd.DataFrame | None = None

    def _keep(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        self.log.append(record)

    async def run(self) -> SweepResult:
        self.out.open(resume=self.plan.resume, nonce=self.nonce)
        self.nonce = self.out.nonce
        self.records = [_from_json(r) for r in self.out.records if not r.get("cancelled")]
        self.previous_runs = self.out.previous_runs
        overall = tqdm(total=len(self.plan.levels), desc="sweep", unit="level", disable=not self.plan.progress)
        try:
            for level in self.plan.levels:
                if time.monotonic() >= self.loop_deadline:
                    self.stopped = self.stopped or self._deadline_text()
                    break
                await self._run_level(level)
                result = self._result()
                self.out.write_tables(result.runs, result.levels, "running")
                overall.update()
        except asyncio.CancelledError:
            self.stopped = "interrupted"
            raise
        finally:
            result = self._result()
            self.out.write_tables(
                result.runs, result.levels, f"stopped: {self.stopped}" if self.stopped else "complete"
            )
            self.out.close()
            overall.close()
        if self.stopped:
            warnings.warn(f"sweep stopped early: {self.stopped}", RuntimeWarning, stacklevel=3)
        return result

    # -- one level ---------------------------------------------------------------------------------
    async def _run_level(self, level: _Level) -> None:
        plan = self.plan
        done = self._records_of(level)  # from earlier sessions, when resuming
        finished = {r["lane"] for r in done if r.get("final")}
        todo = [i for i in range(len(plan.messages)) if i not in finished]
        if not todo:
            self.runs.append(self._previous_row(level) or self._row(level, NAN, resumed=True))
            return
        messages = [self._tagged(i, level) for i in range(len(plan.messages))]
        next_attempt = {i: 1 + max((r["attempt"] for r in done if r["lane"] == i), default=0) for i in todo}
        keys = {
            "in_flight": level.in_flight,
            "repeat": level.repeat,
            "rate_rps": level.rate_rps,
            "session": self.session,
        }
        before = await self._scrape()
        bar = tqdm(total=len(todo), desc=level.label, unit="lane", leave=False, position=1, disable=not plan.progress)
        cap = asyncio.Semaphore(level.in_flight)
        tasks: list[asyncio.Task] = []
        interrupted = False
        t0 = time.perf_counter()

        async def lane(i: int) -> None:
            try:
                await run_lane(
                    self.ctx,
                    index=i,
                    prompt=plan.prompts[i],
                    messages=messages[i],
                    keys=keys,
                    first_attempt=next_attempt[i],
                    level_t0=t0,
                )
            finally:
                cap.release()
                bar.update(1)

        try:
            remaining = self.loop_deadline - time.monotonic()
            async with asyncio.timeout(remaining if math.isfinite(remaining) else None):
                for i, offset in zip(todo, self._offsets(level, len(todo))):
                    delay = t0 + offset - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    await cap.acquire()
                    tasks.append(asyncio.create_task(lane(i)))
                await asyncio.gather(*tasks)
        except TimeoutError:
            self.stopped = self._deadline_text()
        except asyncio.CancelledError:
            interrupted = True
            self.stopped = "interrupted"
            raise
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            bar.close()
            wall = time.perf_counter() - t0
            after = None if self.stopped or interrupted else await self._scrape()
            self.runs.append(self._row(level, wall, before=before, after=after, resumed=bool(done)))

    def _offsets(self, level: _Level, n: int) -> list[float]:
        if self.plan.closed_loop:
            return [0.0] * n
        seed = self.plan.seed + 1000 * self.plan.levels.index(level)
        offsets = arrival_offsets_s(n, level.rate_rps, arrivals=self.plan.arrivals, ca2=self.plan.ca2, seed=seed)
        return offsets.tolist()

    def _row(
        self,
        level: _Level,
        wall: float,
        *,
        before: Snapshot | None = None,
        after: Snapshot | None = None,
        resumed: bool,
    ) -> dict[str, Any]:
        records = pd.DataFrame(self._records_of(level), columns=LANE_COLUMNS)
        reasons = []
        server = Delta()
        if resumed:
            wall = NAN
            server = Delta(prefix_reason="level resumed", output_reason="level resumed")
            reasons.append("level spans a resumed sweep: wall clock and server counters cover only part of it")
        elif self.stopped:
            unfinished = len(self.plan.messages) - int(records["final"].astype(bool).sum())
            reasons.append(f"level cut short ({self.stopped}); {unfinished} lanes unfinished")
            server = Delta(prefix_reason="level cut short", output_reason="level cut short")
        elif self.plan.metrics_url is None:
            server = Delta(prefix_reason="metrics scraping turned off", output_reason="metrics scraping turned off")
        else:
            measured = records[records["outcome"].isin(["ok", "rejected"])]
            server = delta(before, after).checked(measured["prompt_tokens"].sum(), measured["output_tokens"].sum())
        if server.prefix_reason:
            reasons.append(f"prefix_hit_rate: {server.prefix_reason}")
        if server.output_reason:
            reasons.append(f"server_output_tokens: {server.output_reason}")
        return summarize(
            records,
            in_flight=level.in_flight,
            rate_rps=level.rate_rps,
            repeat=level.repeat,
            lanes=len(self.plan.messages),
            wall_s=wall,
            server_hit_rate=server.prefix_hit_rate,
            server_output_tokens=server.output_tokens,
            slo_ttft_ms=self.plan.slo_ttft_ms,
            slo_tpot_ms=self.plan.slo_tpot_ms,
            reasons=reasons,
        )

    def _records_of(self, level: _Level) -> list[dict[str, Any]]:
        return [r for r in self.records if _matches(r, level)]

    def _previous_row(self, level: _Level) -> dict[str, Any] | None:
        prev = self.previous_runs
        if prev is None or not len(prev) or not {"in_flight", "repeat", "rate_rps"} <= set(prev.columns):
            return None
        same_rate = prev["rate_rps"].isna() if math.isnan(level.rate_rps) else prev["rate_rps"] == level.rate_rps
        hit = prev[(prev["in_flight"] == level.in_flight) & (prev["repeat"] == level.repeat) & same_rate]
        return None if hit.empty else hit.iloc[-1].to_dict()

    async def _scrape(self) -> Snapshot | None:
        if self.plan.metrics_url is None:
            return None
        limit_s = min(_METRICS_TIMEOUT_S, self.loop_deadline - time.monotonic())
        if limit_s <= 0:
            return Snapshot(None, reason="no time left before the sweep's deadline to read /metrics")
        return await scrape_snapshot(self.client, self.plan.metrics_url, limit_s, self.plan.metrics_auth)

    def _tagged(self, i: int, level: _Level) -> list[dict[str, Any]]:
        messages = self.plan.messages[i]
        if not self.plan.tag_levels:
            return messages
        # the first characters differ between level runs, so no prefix cache can match across them
        run_key = hashlib.sha256(f"{self.nonce}/{level.label}/{level.repeat}".encode()).hexdigest()[:8]
        tag = f"[{run_key} sweep level {level.label} repeat {level.repeat}]"
        first = {**messages[0], "content": f"{tag}\n{messages[0]['content']}"}
        return [first, *messages[1:]]

    def _deadline_text(self) -> str:
        return f"the sweep's total deadline (deadline_s={self.plan.deadline_s}) was reached"

    def _result(self) -> SweepResult:
        lanes = pd.DataFrame(self.records, columns=LANE_COLUMNS)
        runs = pd.DataFrame(self.runs, columns=RUN_COLUMNS) if self.runs else pd.DataFrame(columns=RUN_COLUMNS)
        return from_runs(lanes, runs, closed_loop=self.plan.closed_loop, params=self.plan.params, stopped=self.stopped)


def _matches(record: dict[str, Any], level: _Level) -> bool:
    return (
        record["in_flight"] == level.in_flight
        and record["repeat"] == level.repeat
        and _same_rate(record["rate_rps"], level.rate_rps)
    )


def _from_json(record: dict[str, Any]) -> dict[str, Any]:
    # JSON wrote unknown numbers as null; the frame wants NaN
    return {k: (NAN if v is None and k != "error" else v) for k, v in record.items()}
