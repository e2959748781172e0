"""Concurrency sweep against any OpenAI-compatible chat endpoint (vLLM, SGLang, llama-server, TGI).

The same fixed lanes (one prompt each) run at every level: closed-loop levels keep at most ``limit``
lanes in flight (started in prompt order as permits free up); open-loop levels (``rates=``) start lanes
at Poisson or gamma arrival times, optionally capped by ``max_in_flight``. Each lane is one streamed
chat completion plus optional post-processing (see :mod:`toolkit._sweep.lanes` for every metric's
definition), and each level is summarised into one row (see :mod:`toolkit._sweep.levels` for the
aggregates and the batching/queueing verdict). Server counters come from ``/metrics``
(:mod:`toolkit._sweep.metrics`); files on disk from :mod:`toolkit._sweep.files`.

Level tags. With ``tag_levels`` each level run puts ``[<key> sweep level <L> repeat <r>]`` at the
very start of the first message, ``<key>`` a hash of the sweep's nonce, the level and the repeat.
Prefix caches match from the first token, so a tag there breaks every reuse of an earlier level's (or
an earlier sweep's) prompts, while all lanes of one level still share the tag *and* everything after
it up to the per-lane part. Build prompts with the per-lane part last (``system_prompt`` shared, the
prompt string per lane) and lanes share the longest prefix. A tag placed after the shared preamble
would instead let a level reuse the preamble cached by the one before it. Only the chat template's
fixed opening tokens stay shared across levels.

Stopping. ``deadline_s`` bounds the whole sweep: at the deadline nothing new starts, lanes in flight
are cancelled and recorded as errors ("cancelled: ..."), files are written and the partial result is
returned with ``stopped`` set (and a warning). Ctrl-C under :func:`run_sweep` (asyncio turns it into
cancelling the sweep), or cancelling the task that awaits :func:`sweep`, stops the same way, writes
the files and re-raises. A failed lane is recorded with its error and never counted as zero tokens.

Resuming. With ``out_dir``, ``resume=True`` reads ``lanes.jsonl`` and ``runs.csv`` back, skips lanes
whose last attempt is final, continues the others (attempt numbering continues; cancelled attempts
are dropped and rerun) and keeps finished levels. A level that spans two sessions has no single wall
clock: its wall-clock figures and server deltas are NaN, with a reason.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import math
import os
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
from tqdm.auto import tqdm

from toolkit import __version__
from toolkit._args import check_choice, check_int, check_number
from toolkit._queueing.arrivals import ARRIVALS, arrival_offsets_s
from toolkit._sweep.files import (
    LEVELS_FILE,
    RUN_FILE,
    RUNS_FILE,
    LaneLog,
    read_frame,
    read_json,
    redact,
    split_credentials,
    write_frame,
    write_json,
)
from toolkit._sweep.lanes import LANE_COLUMNS, Lane, LaneContext, run_lane
from toolkit._sweep.levels import AGGREGATE_COLUMNS, RUN_COLUMNS, add_relative, aggregate, summarize
from toolkit._sweep.metrics import Delta, Snapshot, delta, scrape_snapshot

__all__ = ["SweepResult", "run_sweep", "sweep"]

NAN = math.nan
_PROBE_TIMEOUT_S = 10.0
_METRICS_TIMEOUT_S = 10.0
# parameters that define the work; resuming with any of them changed would mix two experiments
_FINGERPRINT = (
    "model",
    "prompts_sha256",
    "limits",
    "rates",
    "arrival",
    "ca2",
    "seed",
    "max_in_flight",
    "max_tokens",
    "repeats",
    "tag_levels",
    "extra_body",
)


@dataclass(frozen=True)
class SweepResult:
    """The outcome of a sweep: lane attempts, level rows and how the run ended.

    Attributes
    ----------
    lanes : pandas.DataFrame
        One row per lane attempt, columns ``in_flight``, ``lane`` (index into ``prompts``),
        ``attempt`` (1-based), ``ttft_ms``, ``tpot_ms``, ``e2e_ms`` (ms), ``llm_s`` (s),
        ``output_tokens``, ``prompt_tokens``, ``cached_tokens`` (tokens), ``slot_wait_s``,
        ``postprocess_s`` (s), ``outcome`` (ok, rejected or error), ``error`` (text), then
        ``repeat``, ``rate_rps``, ``final``, ``cancelled``, ``tokens_from_usage``, ``content_chunks``,
        ``status_code``, ``retry_after_s``, ``start_s``/``end_s`` (s from the level's start),
        llama.cpp's ``server_tpot_ms``, ``server_predicted_ms``, ``server_predicted_n``,
        ``server_prompt_ms``, ``server_prompt_n``, ``server_cache_n`` and ``session``.
    levels : pandas.DataFrame
        One row per level (repeats averaged): ``in_flight``, ``lanes``, ``wall_s`` (s),
        ``s_per_candidate`` (s, wall / lanes finished), ``speedup``, ``llm_sum_s`` (s), ``achieved_concurrency``,
        ``postprocess_sum_s``, ``slot_wait_s`` (s), ``prompt_tokens``, ``output_tokens``,
        ``dec_tok_s`` (tokens/s), ``tok_s_gain``, ``lanes_ok``, ``prefix_hit_rate`` (server),
        ``provider_cached_rate``, ``ttft_p50_ms`` ... ``tpot_p99_ms`` (ms), ``verdict``, then
        ``rate_rps``, ``achieved_rps``, ``goodput_rps`` (req/s), ``attempts``, ``lanes_failed``,
        ``lanes_unfinished``, ``server_output_tokens``, ``llm_ms_per_token``, ``elasticity``,
        ``repeats``, ``wall_s_ci95``, ``dec_tok_s_ci95`` (95% CI half-widths) and ``reason``.
    runs : pandas.DataFrame
        One row per level and repeat, the level columns plus ``repeat``.
    params : dict
        The sweep's parameters as written to ``run.json`` (no API key).
    stopped : str
        Empty when every level ran; otherwise why the sweep stopped early.
    """

    lanes: pd.DataFrame
    levels: pd.DataFrame
    runs: pd.DataFrame
    params: dict = field(default_factory=dict)
    stopped: str = ""


_DOC = """{summary}

    Parameters
    ----------
    base_url : str
        The server's root, ``http://host:port`` (a trailing ``/v1`` is accepted). Chat requests go to
        ``/v1/chat/completions``; the probe to ``/v1/models``.
    model : str or None
        Model name sent with every request; None takes the first model ``/v1/models`` lists.
    prompts : sequence of str or of chat-message lists
        One lane per element, the same at every level; results are aligned with it (column ``lane``).
        A string becomes a user message (after ``system_prompt`` when given); a list of
        ``{{"role", "content"}}`` dicts is sent as is. Put the per-lane part last.
    limits : sequence of int
        Closed-loop in-flight limits, each 1..len(prompts), run in the order given.
    max_tokens : int
        Output tokens per request (>= 1).
    postprocess : callable or None
        ``postprocess(lane)`` with a :class:`toolkit._sweep.lanes.Lane` (``text``, ``index``, ``record``
        ...), sync or async, run while holding one of ``slots`` permits after a successful stream.
        Truthy accepts; falsy or raising rejects (and retries while ``attempts`` allow). A sync one
        runs in a worker thread, so other lanes keep streaming.
    slots : int
        Permits for post-processing (>= 1): what serializes in the user's pipeline.
    attempts : int
        Maximum attempts per lane (1..100), each recorded.
    tag_levels : bool
        Put a level tag at the start of every prompt, so a level cannot reuse cached work of an
        earlier one (see the module notes on where the tag goes).
    metrics_url : str, None or False
        Prometheus page scraped before and after each level; None means ``<root>/metrics``, False
        turns scraping off.
    api_key : str or None
        Bearer token; None reads the environment variable ``api_key_env``. Never written anywhere.
    out_dir : str, path or None
        Folder for ``lanes.jsonl`` (appended per attempt), ``runs.csv``, ``levels.csv``, ``run.json``.
    resume : bool
        Continue the sweep recorded in ``out_dir`` (same parameters), skipping finished lanes.
    timeout_s : float
        Limit for one request, connection to last byte, in seconds (> 0).
    rates : sequence of float or None
        Open-loop request rates (requests/s, > 0) run instead of ``limits``.
    arrival : str
        ``poisson`` or ``gamma`` arrivals for ``rates``.
    ca2 : float
        Squared coefficient of variation of gamma inter-arrival gaps (0 < ca2 <= 10,000; 1 is Poisson).
    max_in_flight : int or None
        Concurrency cap for open-loop levels (None: uncapped).
    seed : int
        Seed of the arrival schedule (>= 0).
    slo_ttft_ms, slo_tpot_ms : float or None
        SLOs in ms; when either is set, ``goodput_rps`` counts requests meeting all of them per
        second of wall clock (failures are misses).
    repeats : int
        Runs per level (1..1000); levels report means and t-based 95% CI half-widths.
    deadline_s : float or None
        Limit for the whole sweep in seconds (> 0); see ``stopped``.
    system_prompt : str or None
        Shared system message put before each string prompt.
    extra_body : mapping or None
        Extra JSON fields for every request (``temperature``, ``ignore_eos`` ...).
    api_key_env : str or None
        Environment variable read when ``api_key`` is None.
    progress : bool
        Show a tqdm bar per level.

    Returns
    -------
    SweepResult
        ``lanes`` (one row per attempt), ``levels`` (one row per level), ``runs`` (per repeat),
        ``params``, ``stopped``; the columns and units are listed on :class:`SweepResult`.

    Raises
    ------
    ValueError
        An argument out of range (the message names it), or ``out_dir`` holding another sweep.
    ConnectionError
        Nothing answered at ``<base_url>/v1/models``.
    PermissionError
        The server refused the API key.
"""


async def sweep(
    base_url: str,
    model: str | None,
    prompts: Sequence[str | Sequence[Mapping[str, Any]]],
    limits: Sequence[int] = (1, 2, 4, 8, 16, 32),
    max_tokens: int = 256,
    postprocess: Callable[[Lane], Any] | None = None,
    slots: int = 1,
    attempts: int = 1,
    tag_levels: bool = True,
    metrics_url: str | None | bool = None,
    api_key: str | None = None,
    out_dir: str | os.PathLike | None = None,
    resume: bool = False,
    timeout_s: float = 600.0,
    *,
    rates: Sequence[float] | None = None,
    arrival: str = "poisson",
    ca2: float = 1.0,
    max_in_flight: int | None = None,
    seed: int = 0,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    repeats: int = 1,
    deadline_s: float | None = None,
    system_prompt: str | None = None,
    extra_body: Mapping[str, Any] | None = None,
    api_key_env: str | None = "TOOLKIT_API_KEY",
    progress: bool = True,
) -> SweepResult:
    args = dict(locals())
    plan = _Plan.from_args(args)
    async with httpx.AsyncClient(
        headers=plan.headers,
        auth=plan.auth,
        timeout=httpx.Timeout(plan.timeout_s),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        trust_env=False,  # a benchmark talks to base_url directly, never through an env proxy
    ) as client:
        models = await _probe(client, plan)
        if plan.model is None:
            plan.model = plan.params["model"] = models[0]
        return await _Runner(plan, client).run()


def run_sweep(
    base_url: str,
    model: str | None,
    prompts: Sequence[str | Sequence[Mapping[str, Any]]],
    limits: Sequence[int] = (1, 2, 4, 8, 16, 32),
    max_tokens: int = 256,
    postprocess: Callable[[Lane], Any] | None = None,
    slots: int = 1,
    attempts: int = 1,
    tag_levels: bool = True,
    metrics_url: str | None | bool = None,
    api_key: str | None = None,
    out_dir: str | os.PathLike | None = None,
    resume: bool = False,
    timeout_s: float = 600.0,
    *,
    rates: Sequence[float] | None = None,
    arrival: str = "poisson",
    ca2: float = 1.0,
    max_in_flight: int | None = None,
    seed: int = 0,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    repeats: int = 1,
    deadline_s: float | None = None,
    system_prompt: str | None = None,
    extra_body: Mapping[str, Any] | None = None,
    api_key_env: str | None = "TOOLKIT_API_KEY",
    progress: bool = True,
) -> SweepResult:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # no loop running: the normal case for a script
    else:
        raise RuntimeError("run_sweep() cannot run inside a running event loop; use `await toolkit.sweep(...)`")
    return asyncio.run(sweep(**locals()))


sweep.__doc__ = _DOC.format(
    summary="Run a concurrency sweep from a running event loop (a notebook): ``await toolkit.sweep(...)``."
)
run_sweep.__doc__ = _DOC.format(
    summary="Run a concurrency sweep and return its DataFrames (scripts; in a notebook use ``sweep``)."
)


@dataclass
class _Level:
    in_flight: int
    rate_rps: float
    repeat: int

    @property
    def label(self) -> str:
        return f"in-flight {self.in_flight}" if math.isnan(self.rate_rps) else f"{self.rate_rps:g} req/s"


@dataclass
class _Plan:
    """Validated arguments, the lanes' messages and what run.json records."""

    root: str
    chat_url: str
    metrics_url: str | None
    model: str | None
    prompts: list[Any]
    messages: list[list[dict[str, Any]]]
    levels: list[_Level]
    closed_loop: bool
    max_tokens: int
    postprocess: Callable | None
    slots: int
    attempts: int
    tag_levels: bool
    timeout_s: float
    deadline_s: float | None
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    extra_body: dict[str, Any]
    arrival: str
    ca2: float
    seed: int
    max_in_flight: int | None
    out_dir: Path | None
    resume: bool
    progress: bool
    headers: dict[str, str]
    auth: httpx.BasicAuth | None  # from user:password@ in base_url
    metrics_auth: httpx.BasicAuth | None
    secrets: tuple[str, ...]
    params: dict[str, Any]

    @classmethod
    def from_args(cls, a: dict[str, Any]) -> _Plan:
        if not isinstance(a["base_url"], str) or not a["base_url"].startswith(("http://", "https://")):
            raise ValueError("base_url must be an http(s) URL such as http://127.0.0.1:8000")
        base_url, auth, url_secrets = split_credentials(a["base_url"])
        root = base_url.rstrip("/").removesuffix("/v1").rstrip("/")
        if a["model"] is not None and (not isinstance(a["model"], str) or not a["model"]):
            raise ValueError(f"model must be a non-empty string or None, got {a['model']!r}")
        if a["system_prompt"] is not None and not isinstance(a["system_prompt"], str):
            raise ValueError(f"system_prompt must be a string or None, got {type(a['system_prompt']).__name__}")
        messages = _messages(a["prompts"], a["system_prompt"])
        n = len(messages)
        closed_loop = a["rates"] is None
        max_in_flight = None if a["max_in_flight"] is None else check_int("max_in_flight", a["max_in_flight"], low=1)
        repeats = check_int("repeats", a["repeats"], low=1, high=1000)
        if closed_loop:
            limits = _int_list("limits", a["limits"], low=1, high=n)
            rates: list[float] = []
            keys = [(limit, NAN) for limit in limits]
        else:
            rates = _float_list("rates", a["rates"])
            limits = []
            keys = [(max_in_flight or n, rate) for rate in rates]
        arrival = check_choice("arrival", a["arrival"], ARRIVALS)
        ca2 = check_number("ca2", a["ca2"], low=0, low_inclusive=False, high=10_000)
        if arrival == "poisson" and ca2 != 1.0:
            raise ValueError(f"ca2 must be 1 for poisson arrivals (use arrival='gamma'), got {ca2!r}")
        for name in ("tag_levels", "resume", "progress"):
            if not isinstance(a[name], bool):
                raise ValueError(f"{name} must be True or False, got {a[name]!r}")
        if a["postprocess"] is not None and not callable(a["postprocess"]):
            raise ValueError(f"postprocess must be callable or None, got {type(a['postprocess']).__name__}")
        extra_body = a["extra_body"] or {}
        if not isinstance(extra_body, Mapping):
            raise ValueError(f"extra_body must be a mapping or None, got {type(extra_body).__name__}")
        api_key = a["api_key"]
        if api_key is None and a["api_key_env"]:
            api_key = os.environ.get(a["api_key_env"]) or None
        if api_key is not None and (not isinstance(api_key, str) or not api_key.strip()):
            raise ValueError("api_key must be a non-empty string or None")
        out_dir = None if a["out_dir"] is None else Path(a["out_dir"])
        if a["resume"] and out_dir is None:
            raise ValueError("resume=True needs out_dir (the folder of the sweep to continue)")
        metrics_url = a["metrics_url"]
        if metrics_url is None or metrics_url is True:
            metrics_url = root + "/metrics"
        elif metrics_url is False:
            metrics_url = None
        elif not isinstance(metrics_url, str) or not metrics_url.startswith(("http://", "https://")):
            raise ValueError("metrics_url must be an http(s) URL, None or False")
        metrics_auth = auth
        if metrics_url is not None and metrics_url != root + "/metrics":
            metrics_url, metrics_auth, more = split_credentials(metrics_url)
            url_secrets += more
        plan = cls(
            root=root,
            chat_url=root + "/v1/chat/completions",
            metrics_url=metrics_url,
            model=a["model"],
            prompts=list(a["prompts"]),
            messages=messages,
            levels=[_Level(k, r, rep) for k, r in keys for rep in range(1, repeats + 1)],
            closed_loop=closed_loop,
            max_tokens=check_int("max_tokens", a["max_tokens"], low=1, high=1_000_000),
            postprocess=a["postprocess"],
            slots=check_int("slots", a["slots"], low=1, high=10_000),
            attempts=check_int("attempts", a["attempts"], low=1, high=100),
            tag_levels=a["tag_levels"],
            timeout_s=check_number("timeout_s", a["timeout_s"], low=0, low_inclusive=False, high=86_400),
            deadline_s=_optional_positive("deadline_s", a["deadline_s"]),
            slo_ttft_ms=_optional_positive("slo_ttft_ms", a["slo_ttft_ms"]),
            slo_tpot_ms=_optional_positive("slo_tpot_ms", a["slo_tpot_ms"]),
            extra_body=dict(extra_body),
            arrival=arrival,
            ca2=ca2,
            seed=check_int("seed", a["seed"], low=0, high=2**63 - 1),
            max_in_flight=max_in_flight,
            out_dir=out_dir,
            resume=a["resume"],
            progress=a["progress"],
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            auth=None if api_key else auth,  # the bearer token wins over URL credentials
            metrics_auth=None if api_key else metrics_auth,
            secrets=((api_key,) if api_key else ()) + url_secrets,
            params={},
        )
        plan.params = {
            "base_url": root,
            "model": plan.model,
            "lanes": n,
            "prompts_sha256": hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest(),
            "limits": limits,
            "rates": rates,
            "arrival": arrival,
            "ca2": ca2,
            "seed": plan.seed,
            "max_in_flight": max_in_flight,
            "max_tokens": plan.max_tokens,
            "slots": plan.slots,
            "attempts": plan.attempts,
            "tag_levels": plan.tag_levels,
            "metrics_url": metrics_url,
            "timeout_s": plan.timeout_s,
            "deadline_s": plan.deadline_s,
            "repeats": repeats,
            "slo_ttft_ms": plan.slo_ttft_ms,
            "slo_tpot_ms": plan.slo_tpot_ms,
            "extra_body": plan.extra_body,
            "postprocess": getattr(plan.postprocess, "__qualname__", None) if plan.postprocess else None,
            "api_key_set": bool(api_key),
        }
        return plan


class _Runner:
    """Runs the levels of one sweep, writing records and rows as they finish."""

    def __init__(self, plan: _Plan, client: httpx.AsyncClient) -> None:
        self.plan = plan
        self.client = client
        self.session = uuid.uuid4().hex[:12]
        self.log = LaneLog(plan.out_dir, plan.secrets)
        self.records: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.stopped = ""
        self.started = _now()
        self.nonce = uuid.uuid4().hex[:8]
        self.sessions = [self.session]
        self.loop_deadline = math.inf if plan.deadline_s is None else time.monotonic() + plan.deadline_s
        self.ctx = LaneContext(
            client=client,
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
        self._open_out_dir()
        try:
            for level in self.plan.levels:
                if time.monotonic() >= self.loop_deadline:
                    self.stopped = self.stopped or self._deadline_text()
                    break
                await self._run_level(level)
        except asyncio.CancelledError:
            self.stopped = "interrupted"
            raise
        finally:
            result = self._result()
            self._write(result)
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
            self.runs.append(self._previous_row(level) or self._row(level, NAN, None, None, resumed=True))
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
        bar = tqdm(total=len(todo), desc=level.label, unit="lane", leave=False, disable=not plan.progress)
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
            self.runs.append(self._row(level, wall, before, after, resumed=bool(done)))

    def _offsets(self, level: _Level, n: int) -> list[float]:
        if self.plan.closed_loop:
            return [0.0] * n
        seed = self.plan.seed + 1000 * self.plan.levels.index(level)
        offsets = arrival_offsets_s(n, level.rate_rps, arrival=self.plan.arrival, ca2=self.plan.ca2, seed=seed)
        return offsets.tolist()

    def _row(
        self, level: _Level, wall: float, before: Snapshot | None, after: Snapshot | None, *, resumed: bool
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
        return await scrape_snapshot(self.client, self.plan.metrics_url, _METRICS_TIMEOUT_S, self.plan.metrics_auth)

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

    # -- files -------------------------------------------------------------------------------------
    def _open_out_dir(self) -> None:
        out = self.plan.out_dir
        if out is None:
            return
        out.mkdir(parents=True, exist_ok=True)
        previous = read_json(out / RUN_FILE)
        existing = self.log.read()
        if not self.plan.resume:
            if previous is not None or existing:
                raise ValueError(f"out_dir {str(out)!r} already holds a sweep; pass resume=True or use another folder")
            return
        if previous is not None:
            changed = [k for k in _FINGERPRINT if previous.get("params", {}).get(k) != _jsonish(self.plan.params[k])]
            if changed:
                raise ValueError(
                    f"resume=True but out_dir {str(out)!r} holds a sweep with different {', '.join(changed)}"
                )
            self.nonce = previous.get("nonce", self.nonce)
            self.sessions = [*previous.get("sessions", []), self.session]
            self.started = previous.get("started_utc", self.started)
        self.records = [_from_json(r) for r in existing if not r.get("cancelled")]
        self.previous_runs = read_frame(out / RUNS_FILE)

    def _result(self) -> SweepResult:
        lanes = pd.DataFrame(self.records, columns=LANE_COLUMNS)
        runs = pd.DataFrame(self.runs, columns=RUN_COLUMNS) if self.runs else pd.DataFrame(columns=RUN_COLUMNS)
        if len(runs):
            runs = pd.concat(
                [add_relative(g, closed_loop=self.plan.closed_loop) for _, g in runs.groupby("repeat", sort=False)]
            )[RUN_COLUMNS].reset_index(drop=True)
        levels = (
            aggregate(runs, lanes, closed_loop=self.plan.closed_loop)
            if len(runs)
            else pd.DataFrame(columns=AGGREGATE_COLUMNS)
        )
        return SweepResult(lanes=lanes, levels=levels, runs=runs, params=dict(self.plan.params), stopped=self.stopped)

    def _write(self, result: SweepResult) -> None:
        out = self.plan.out_dir
        if out is None:
            return
        secrets = self.plan.secrets
        write_frame(result.runs, out / RUNS_FILE, secrets)
        write_frame(result.levels, out / LEVELS_FILE, secrets)
        status = "complete" if not self.stopped else f"stopped: {self.stopped}"
        run = {
            "toolkit_version": __version__,
            "status": status,
            "nonce": self.nonce,
            "sessions": self.sessions,
            "started_utc": self.started,
            "updated_utc": _now(),
            "params": result.params,
        }
        write_json(run, out / RUN_FILE, secrets)


async def _probe(client: httpx.AsyncClient, plan: _Plan) -> list[str]:
    """Check that a server answers and return the model ids it lists (may be empty)."""
    url = plan.root + "/v1/models"
    try:
        response = await client.get(url, timeout=min(plan.timeout_s, _PROBE_TIMEOUT_S))
    except httpx.HTTPError as exc:
        raise ConnectionError(
            redact(f"nothing answered at {url} ({type(exc).__name__}); is the server running?", plan.secrets)
        ) from None
    if response.status_code in (401, 403):
        raise PermissionError(
            redact(f"{url} refused the request (HTTP {response.status_code}); check api_key", plan.secrets)
        )
    try:
        ids = [m["id"] for m in response.json().get("data", []) if isinstance(m, dict) and "id" in m]
    except (ValueError, AttributeError, TypeError):
        ids = []
    if plan.model is None and not ids:
        raise ValueError(f"model is None but {redact(url, plan.secrets)} lists no model; pass model=")
    return ids


def _messages(prompts: Any, system_prompt: str | None) -> list[list[dict[str, Any]]]:
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or not len(prompts):
        raise ValueError("prompts must be a non-empty sequence of strings or of chat-message lists")
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            out.append([*system, {"role": "user", "content": p}])
            continue
        ok = isinstance(p, Sequence) and len(p) > 0
        ok = ok and all(isinstance(m, Mapping) and isinstance(m.get("content"), str) and "role" in m for m in p)
        if not ok:
            raise ValueError(f"prompts[{i}] must be a string or a list of {{'role', 'content': str}} messages")
        out.append([*system, *(dict(m) for m in p)])
    return out


def _int_list(name: str, values: Any, *, low: int, high: int) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not len(values):
        raise ValueError(f"{name} must be a non-empty sequence of integers in {low}..{high}")
    out = [check_int(f"{name}[{i}]", v, low=low, high=high) for i, v in enumerate(values)]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat a value, got {out}")
    return out


def _float_list(name: str, values: Any) -> list[float]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not len(values):
        raise ValueError(f"{name} must be a non-empty sequence of positive numbers")
    out = [check_number(f"{name}[{i}]", v, low=0, low_inclusive=False, high=1e6) for i, v in enumerate(values)]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat a value, got {out}")
    return out


def _optional_positive(name: str, value: Any) -> float | None:
    return None if value is None else check_number(name, value, low=0, low_inclusive=False)


def _same_rate(a: Any, b: float) -> bool:
    a = NAN if a is None else float(a)
    return (math.isnan(a) and math.isnan(b)) or a == b


def _matches(record: dict[str, Any], level: _Level) -> bool:
    return (
        record["in_flight"] == level.in_flight
        and record["repeat"] == level.repeat
        and _same_rate(record["rate_rps"], level.rate_rps)
    )


def _from_json(record: dict[str, Any]) -> dict[str, Any]:
    # JSON wrote unknown numbers as null; the frame wants NaN
    return {k: (NAN if v is None and k != "error" else v) for k, v in record.items()}


def _jsonish(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
