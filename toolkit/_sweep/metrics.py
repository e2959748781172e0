"""Server-side counters from a Prometheus ``/metrics`` page, and their per-level deltas.

The sweep scrapes ``/metrics`` before and after each level and reports what the *server* says it did
over that interval, beside what the client measured: the prefix-cache hit rate and the number of
generated tokens. Four engines are recognised, each by the series it exposes:

======== ===================================================== =========================================
engine   prefix-cache counters (hit rate = hits / looked up)   generated-token counter
======== ===================================================== =========================================
vLLM     ``vllm:prefix_cache_hits_total`` /                    ``vllm:generation_tokens_total``
         ``vllm:prefix_cache_queries_total`` (and the
         deprecated ``vllm:gpu_prefix_cache_hits`` / ``_queries``)
SGLang   ``sglang:cached_tokens_total`` /                      ``sglang:generation_tokens_total``
         ``sglang:prompt_tokens_total``
llama.cpp ``llamacpp:prompt_tokens_cached_total`` /            ``llamacpp:tokens_predicted_total``
         (``llamacpp:prompt_tokens_total`` + cached); llama.cpp's
         prompt counter excludes cached tokens
TGI      none (TGI exposes no prefix-cache counter); prompt    ``tgi_request_generated_tokens_sum``
         tokens from ``tgi_request_input_length_sum``
======== ===================================================== =========================================

Availability is decided by a series' presence, never by a non-zero value: a cold server's zero is a
valid baseline. A counter that went down between two scrapes (the server restarted) gives no delta,
and the reason says so. SGLang's ``sglang:cache_hit_rate`` gauge is a running average, not a counter,
so it cannot be attributed to one level and is not used.

TGI (text-generation-inference) names come from its router (``router/src/server.rs``,
``router/src/validation.rs``) and ``docs/source/reference/metrics.md``, huggingface/text-generation-inference
at db931fcf (January 2026). Both series are histograms: ``_sum`` adds the per-request values, the input
length when a request passes validation and the generated tokens when it succeeds. TGI's exporter
(metrics-exporter-prometheus) writes a series only once it has been recorded, so a TGI page is
recognised by any ``tgi_`` series and a token series it lacks is zero so far, not unavailable. Its
other series have no counterpart here and are not read: ``tgi_request_count`` and
``tgi_request_success`` count requests, not tokens; ``tgi_queue_size`` and ``tgi_batch_current_size``
are gauges of the moment and ``tgi_request_queue_duration`` is a time.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field, replace

import httpx
import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

from toolkit._args import check_number
from toolkit._sweep.blocking import run_blocking
from toolkit._sweep.bounded import MAX_METRICS_BYTES, BodyTooLarge, fetch
from toolkit._sweep.files import split_credentials
from toolkit._sweep.plan import BearerAuth

__all__ = ["scrape_metrics"]

# engine -> (hits series, looked-up series, generated-tokens series); looked-up None means
# "hits + the prompt series" (llama.cpp counts processed prompt tokens without the cached ones).
_ENGINES: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"),
        "queries": (
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries",
        ),
        "output": ("vllm:generation_tokens_total",),
    },
    "sglang": {
        "hits": ("sglang:cached_tokens_total",),
        "queries": ("sglang:prompt_tokens_total",),
        "output": ("sglang:generation_tokens_total",),
    },
    "llamacpp": {
        "hits": ("llamacpp:prompt_tokens_cached_total",),
        "uncached": ("llamacpp:prompt_tokens_total",),
        "output": ("llamacpp:tokens_predicted_total",),
    },
    "tgi": {
        "queries": ("tgi_request_input_length_sum",),
        "output": ("tgi_request_generated_tokens_sum",),
    },
}

# engine -> the prefix of every series it writes, for engines whose exporter writes a series only after
# its first record: such a page is recognised by the prefix, and a counter it lacks reads as zero.
_WRITTEN_WHEN_RECORDED = {"tgi": "tgi_"}


def scrape_metrics(metrics_url: str, *, timeout_s: float = 5.0, api_key: str | None = None) -> pd.DataFrame:
    """Read a Prometheus ``/metrics`` page into one row per sample.

    Parameters
    ----------
    metrics_url : str
        Full URL of the page, e.g. ``http://127.0.0.1:8080/metrics``.
    timeout_s : float
        Limit for the whole request, connection to last byte, in seconds (> 0 and <= 86400). The
        page may be at most 16 MiB after decompression.
    api_key : str or None
        Sent as a bearer token when given; never stored or echoed. A ``user:password@`` in the URL is
        sent as basic auth and kept out of logged URLs.

    Returns
    -------
    pandas.DataFrame
        ``name`` (sample name as exposed, counters keep their ``_total``; prometheus_client adds one
        to a counter exposed without it, as TGI's are), ``family`` (the metric
        family as prometheus_client names it, counters without ``_total``), ``type`` (counter, gauge,
        histogram, summary, untyped ...), ``labels`` (dict of label name -> value) and ``value``
        (float, in the metric's own unit). ``attrs["engine"]`` names the recognised engine (vllm,
        sglang, llamacpp, tgi) or is None.

    Raises
    ------
    ValueError
        ``metrics_url`` not an http(s) URL, ``timeout_s`` not > 0, or the page not in the Prometheus
        text format or over 16 MiB.
    httpx.HTTPError
        The page could not be fetched.
    """
    if not isinstance(metrics_url, str) or not metrics_url.startswith(("http://", "https://")):
        raise ValueError(f"metrics_url must be an http(s) URL, got {metrics_url!r}")
    timeout_s = check_number("timeout_s", timeout_s, low=0, high=86_400, low_inclusive=False)
    url, auth, _ = split_credentials(metrics_url)
    if api_key:
        auth = BearerAuth(api_key)
    return run_blocking(lambda: _scrape_frame(url, auth, timeout_s), name="toolkit-scrape")


async def _scrape_frame(url: str, auth: httpx.Auth | None, timeout_s: float) -> pd.DataFrame:
    async with httpx.AsyncClient(headers={"Accept-Encoding": "identity"}, trust_env=False) as client:
        try:
            status, body = await fetch(
                client,
                "GET",
                url,
                max_bytes=MAX_METRICS_BYTES,
                timeout_s=timeout_s,
                auth=auth or httpx.USE_CLIENT_DEFAULT,
            )
        except TimeoutError:
            raise httpx.TimeoutException(f"{url} did not answer in full within timeout_s={timeout_s:g} s") from None
        except BodyTooLarge as exc:
            raise ValueError(f"{url} is not a usable metrics page: {exc}") from None
    if status != 200:
        raise httpx.HTTPStatusError(
            f"{url} answered HTTP {status}", request=httpx.Request("GET", url), response=httpx.Response(status)
        )
    return await asyncio.to_thread(_frame, body.decode("utf-8", "replace"), url)


def _frame(text: str, url: str) -> pd.DataFrame:
    try:
        rows = _samples(text)
    except Exception as exc:  # the parser raises several types on malformed input
        raise ValueError(f"{url} is not a Prometheus metrics page ({type(exc).__name__}: {exc})") from None
    frame = pd.DataFrame(rows, columns=["name", "family", "type", "labels", "value"])
    frame.attrs["engine"] = _detect(_sum_by_name(rows))
    return frame


@dataclass(frozen=True)
class Snapshot:
    """The cache and token counters of one scrape (summed over label sets), or why there are none."""

    engine: str | None
    counters: dict[str, float] = field(default_factory=dict)  # role (hits, queries, output ...) -> value
    reason: str = ""


@dataclass(frozen=True)
class Delta:
    """Server-side figures over one level: NaN with a reason where they cannot be known."""

    prefix_hit_rate: float = math.nan
    prefix_reason: str = ""
    output_tokens: float = math.nan
    output_reason: str = ""
    prompt_tokens: float = math.nan  # prompt tokens the server looked up in its cache

    def checked(self, prompt_tokens: float, output_tokens: float) -> Delta:
        """This delta, or NaN with a reason where it counts less than the requests carried.

        A server cannot process fewer tokens than the level's completed requests reported (other
        traffic only adds), so a smaller delta means its counters were reset during the level, which
        a before/after pair alone cannot see when the reset fell between them.
        """
        reset = "the server counted fewer tokens than the level's requests carried (counters reset?)"
        out = self
        if self.prompt_tokens < prompt_tokens:
            out = replace(out, prefix_hit_rate=math.nan, prefix_reason=reset)
        if self.output_tokens < output_tokens:
            out = replace(out, output_tokens=math.nan, output_reason=reset)
        return out


def parse_snapshot(text: str) -> Snapshot:
    """Turn the text of a ``/metrics`` page into a :class:`Snapshot` (never raises on bad text)."""
    try:
        rows = _samples(text)
    except Exception as exc:  # the parser raises several types on malformed input
        return Snapshot(None, reason=f"/metrics is not in the Prometheus text format ({type(exc).__name__})")
    values = _sum_by_name(rows)
    engine = _detect(values)
    if engine is None:
        return Snapshot(None, reason="/metrics exposes no known prefix-cache or token counters")
    counters = {}
    for role, names in _ENGINES[engine].items():
        present = [n for n in names if n in values]
        if present:  # the current name wins over a deprecated one
            if not math.isfinite(values[present[0]]) or values[present[0]] < 0:
                return Snapshot(None, reason=f"/metrics reports {present[0]} = {values[present[0]]}, not a count")
            counters[role] = values[present[0]]
        elif engine in _WRITTEN_WHEN_RECORDED:  # nothing recorded yet
            counters[role] = 0.0
    return Snapshot(engine, counters)


async def scrape_snapshot(
    client: httpx.AsyncClient, metrics_url: str, timeout_s: float, auth: httpx.Auth | None = None
) -> Snapshot:
    """Scrape ``metrics_url`` with ``client``; a failure becomes a Snapshot carrying the reason.

    ``timeout_s`` bounds the whole scrape, the page is capped at ``MAX_METRICS_BYTES`` and parsed in
    a worker thread, so a slow or huge page never stalls the lanes streaming on the event loop.
    """
    try:
        status, body = await fetch(
            client,
            "GET",
            metrics_url,
            max_bytes=MAX_METRICS_BYTES,
            timeout_s=timeout_s,
            auth=auth or httpx.USE_CLIENT_DEFAULT,
        )
    except TimeoutError:
        return Snapshot(None, reason=f"/metrics did not answer in full within {timeout_s:g} s")
    except BodyTooLarge as exc:
        return Snapshot(None, reason=f"/metrics could not be read ({exc})")
    except httpx.HTTPError as exc:
        return Snapshot(None, reason=f"/metrics could not be read ({type(exc).__name__})")
    if status != 200:
        return Snapshot(None, reason=f"/metrics answered HTTP {status}")
    return await asyncio.to_thread(parse_snapshot, body.decode("utf-8", "replace"))


def delta(before: Snapshot, after: Snapshot) -> Delta:
    """Server-side prefix hit rate and generated tokens between two snapshots."""
    if before.engine is None or after.engine is None:
        reason = before.reason or after.reason
        return Delta(prefix_reason=reason, output_reason=reason)
    if before.engine != after.engine:
        reason = f"/metrics changed engine between scrapes ({before.engine} -> {after.engine})"
        return Delta(prefix_reason=reason, output_reason=reason)
    diff: dict[str, float] = {}
    went_down = []
    for role in after.counters.keys() & before.counters.keys():
        d = after.counters[role] - before.counters[role]
        if d < 0:
            went_down.append(role)
        diff[role] = d
    restart = "a counter went down between scrapes (server restart?)" if went_down else ""
    output, output_reason = diff.get("output", math.nan), ""
    if "output" not in diff:
        output_reason = f"{after.engine} exposes no generated-token counter"
    if restart:
        return Delta(math.nan, restart, math.nan, restart)
    rate, rate_reason, looked_up = _hit_rate(after.engine, diff)
    return Delta(rate, rate_reason, output, output_reason, looked_up)


def _hit_rate(engine: str, diff: dict[str, float]) -> tuple[float, str, float]:
    looked_up = diff.get("queries", math.nan)
    if engine == "llamacpp" and "uncached" in diff:
        looked_up = diff["uncached"] + diff.get("hits", 0.0)
    if "hits" not in diff:
        return math.nan, f"{engine} exposes no prefix-cache hit counter", looked_up
    if math.isnan(looked_up):
        return math.nan, f"{engine} exposes no prompt-token counter to divide by", looked_up
    if looked_up <= 0:
        return math.nan, "no prompt tokens reached the server during the level", looked_up
    if diff["hits"] > looked_up:
        return math.nan, f"{engine} counted more cache hits than tokens looked up (not a rate)", looked_up
    return diff["hits"] / looked_up, "", looked_up


def _samples(text: str) -> list[dict]:
    """One dict per sample of a Prometheus page (``name``, ``family``, ``type``, ``labels``,
    ``value``); prometheus_client's parser raises on malformed text."""
    return [
        {"name": s.name, "family": fam.name, "type": fam.type, "labels": dict(s.labels), "value": float(s.value)}
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def _sum_by_name(rows: list[dict]) -> dict[str, float]:
    # prometheus_client strips ``_total`` from counter *family* names; sample names keep it, so
    # matching on samples finds ``vllm:prefix_cache_hits_total`` whichever way it was declared.
    out: dict[str, float] = {}
    for row in rows:
        out[row["name"]] = out.get(row["name"], 0.0) + row["value"]
    return out


def _detect(values: dict[str, float]) -> str | None:
    for engine, roles in _ENGINES.items():
        if any(name in values for names in roles.values() for name in names):
            return engine
        prefix = _WRITTEN_WHEN_RECORDED.get(engine)
        if prefix and any(name.startswith(prefix) for name in values):
            return engine
    return None
