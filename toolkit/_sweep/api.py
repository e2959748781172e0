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
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from toolkit._environment import environment
from toolkit._sweep.lanes import Lane
from toolkit._sweep.plan import _Plan
from toolkit._sweep.probe import _probe
from toolkit._sweep.result import SweepResult
from toolkit._sweep.runner import _Runner
from toolkit._sweep.session import CLIENT_LIMITS
from toolkit._vocab.keywords import positional_deprecated

__all__ = ["run_sweep", "sweep"]


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
        Sent only to ``base_url``'s origin (scheme, host and port), as is a ``user:password@`` in
        ``base_url``; redirects are not followed.
    out_dir : str, path or None
        Folder for ``lanes.jsonl`` (appended per attempt), ``runs.csv``, ``levels.csv``, ``run.json``.
    resume : bool
        Continue the sweep recorded in ``out_dir`` (same parameters), skipping finished lanes.
    timeout_s : float
        Limit for one request, connection to last byte, in seconds (> 0).
    rates : sequence of float or None
        Open-loop request rates (requests/s, > 0) run instead of ``limits``.
    arrivals : str
        ``poisson`` or ``gamma`` arrivals for ``rates`` (as :func:`toolkit.simulate`'s).
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
        Runs per level (1..1000); levels report means and t-based 95% CI half-widths. The repeats
        are passes over every level (every level once, then every level again), so that the spread of
        their elasticities holds what moves between the minutes at which the levels ran, which is
        what moves a verdict from one run to the next (``elasticity_ci95``).
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
    metrics_api_key : str or None
        Bearer token for a ``metrics_url`` on another origin (the base URL's credentials never go
        there; a ``user:password@`` in ``metrics_url`` is used first).

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


@positional_deprecated
async def sweep(
    base_url: str,
    model: str | None,
    prompts: Sequence[str | Sequence[Mapping[str, Any]]],
    *,
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
    rates: Sequence[float] | None = None,
    arrivals: str = "poisson",
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
    metrics_api_key: str | None = None,
) -> SweepResult:
    args = dict(locals())
    plan = _Plan.from_args(args)
    # the deadline counts from here: the probe, the scrapes and every backoff fall inside it
    deadline_at = math.inf if plan.deadline_s is None else time.monotonic() + plan.deadline_s
    async with httpx.AsyncClient(
        headers={"Accept-Encoding": "identity"},  # nothing to gain from compressing a stream
        timeout=httpx.Timeout(plan.timeout_s),
        limits=CLIENT_LIMITS,
        trust_env=False,  # a benchmark talks to base_url directly, never through an env proxy
    ) as client:
        models = await _probe(
            client,
            root=plan.root,
            model=plan.model,
            auth=plan.auth,
            timeout_s=min(plan.timeout_s, deadline_at - time.monotonic()),
            secrets=plan.secrets,
        )
        if plan.model is None:
            plan.model = plan.params["model"] = models[0]
        # recorded in run.json beside the fingerprint (a resume checks only the fingerprint's keys)
        plan.params["environment"] = await environment(
            client, plan.root, plan.auth, timeout_s=min(2.0, (deadline_at - time.monotonic()) / 10)
        )
        return await _Runner(plan, client, deadline_at).run()


@positional_deprecated
def run_sweep(
    base_url: str,
    model: str | None,
    prompts: Sequence[str | Sequence[Mapping[str, Any]]],
    *,
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
    rates: Sequence[float] | None = None,
    arrivals: str = "poisson",
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
    metrics_api_key: str | None = None,
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
