"""What a trace replay returns, and its one-row summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from toolkit._sweep.filler import Filler
from toolkit._sweep.records import _record, _Stream, unknown_output

__all__ = ["ReplayResult"]

_PERCENTILES = (50, 90, 99)
_FEW_REQUESTS = 100  # below this many successes a p99 is the largest value or close to it


@dataclass(frozen=True)
class ReplayResult:
    """The outcome of :func:`toolkit.replay_trace`.

    Attributes
    ----------
    requests : pandas.DataFrame
        One row per trace row, in trace order: ``trace_row`` (position in the trace), ``arrival_s``
        (the trace's send time, s from the start), ``scheduled_s`` (when it was due: ``arrival_s``,
        or for a later session turn the previous answer's end plus ``think_time_s``), ``sent_s``
        (actual send, s), ``lateness_ms`` (sent minus
        scheduled, ms), ``ttft_ms``, ``tpot_ms``, ``e2e_ms``, ``itl_ms_p50``, ``itl_ms_max`` (ms, as
        the sweep defines them), ``prompt_tokens`` and ``output_tokens`` (the server's usage counts;
        NaN where it reported none, or where its completion count contradicts the chunks received,
        then ``usage_disagrees``; ``content_chunks`` holds the chunks),
        ``prompt_tokens_target`` and ``output_tokens_target`` (the trace's), ``prompt_exact`` and
        ``output_exact`` (the two agree), ``prompt_words`` (filler words sent, in every user message), ``prompt_reachable``
        (the target is at least the chat template's tokens plus one word), ``cached_tokens`` (prompt
        tokens the server reused from its cache: ``usage.prompt_tokens_details.cached_tokens``, else
        llama.cpp's ``timings.cache_n``, also in ``server_cache_n``),
        ``outcome`` (``ok``, ``error`` or ``not_sent``), ``error`` (text), ``status_code``,
        ``end_s`` (s), llama.cpp's ``server_*`` timings and the trace's other columns. A failure is
        never a zero: its latencies and counts are NaN.
    summary : pandas.DataFrame
        One row: ``requests``, ``sent``, ``ok``, ``failed``, ``not_sent``, ``output_exact_share`` (of
        successful requests with a known output count), ``prompt_exact_share`` (of successful
        requests with a known prompt count and a reachable target), ``output_unknown`` and
        ``prompt_unknown`` (successful requests whose count is unknown), ``prompt_unreachable``
        (targets below the template's floor), ``prompt_tokens_error_mean`` (mean absolute miss where
        reachable, tokens), ``duration_s`` (first send to last completion), ``offered_rps`` (requests
        sent per second of the trace's span), ``achieved_rps`` (successes per second of
        ``duration_s``), ``output_tok_s`` (NaN when an output count is unknown),
        ``cached_tokens`` (their sum over successes), ``prefix_hit_rate`` (that sum over the prompt
        tokens of the successes that report both), ``ttft_p50_ms`` ...
        ``e2e_p99_ms`` (50th, 90th, 99th
        percentiles of successful requests), ``itl_p50_ms`` (median of the per-request medians),
        ``itl_max_ms``, ``lateness_p50_ms``, ``lateness_p99_ms``, ``lateness_max_ms``,
        ``late_sends`` (sends later than ``max_lateness_ms``) and ``fell_behind``.
    params : dict
        Server, model, ``prefix_block_tokens`` (None without prefix blocks), ``closed_loop_sessions``
        (sessions replayed, None without), ``turn_template_tokens`` (the chat template's tokens per
        further exchange, measured with one request before a session replay), how prompts were sized (``prompt_method``: ``tokenize`` when the server's
        ``/tokenize`` picked one-token words, ``calibrated`` otherwise; ``template_tokens`` and
        ``tokens_per_word`` of the fitted line) and the arguments.
    warnings : tuple of str
        What a reader must know before trusting the numbers (the client fell behind, lengths were
        not met, failures, percentiles from few requests).
    """

    requests: pd.DataFrame
    summary: pd.DataFrame
    params: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def requests_frame(
    trace: pd.DataFrame, rows: list[dict], prompt_tokens: np.ndarray, output_tokens: np.ndarray, filler: Filler
) -> pd.DataFrame:
    """The replay's per-request frame (columns on :class:`ReplayResult`) from its rows, in trace order."""
    frame = pd.DataFrame(rows).reindex(columns=_RECORD_COLUMNS)
    frame.insert(0, "trace_row", np.arange(len(trace)))
    frame.insert(1, "arrival_s", trace["arrival_s"].to_numpy(dtype=float))
    frame["scheduled_s"] = frame["scheduled_s"].fillna(frame["arrival_s"].where(frame["sent_s"].notna()))
    # a server that reports only llama.cpp's timings.cache_n still says what it reused
    frame["cached_tokens"] = frame["cached_tokens"].fillna(frame["server_cache_n"])
    frame["prompt_tokens_target"] = prompt_tokens
    frame["output_tokens_target"] = output_tokens
    frame["prompt_words"] = frame["prompt_words"].fillna(pd.Series([filler.words_for(int(n)) for n in prompt_tokens]))
    # a prompt needs the chat template's own tokens plus one word: a shorter target cannot be met
    frame["prompt_reachable"] = prompt_tokens >= filler.template_tokens + filler.tokens_per_word
    ok = frame["outcome"].eq("ok")
    frame["output_exact"] = ok & frame["output_tokens"].eq(frame["output_tokens_target"])
    frame["prompt_exact"] = ok & frame["prompt_tokens"].eq(frame["prompt_tokens_target"])
    for column in trace.columns:
        if column not in frame:
            frame[column] = trace[column].to_numpy()
    frame.attrs.update(trace.attrs)  # the block size of prefix_blocks, the trace's source and scaling
    return frame


# a record's columns (see toolkit._sweep.lanes) after the replay's own timing columns
_RECORD_COLUMNS = ["scheduled_s", "sent_s", "lateness_ms", "end_s", "prompt_words", *_record(_Stream(), 0.0, 0.0, "")]


def _percentile(values: pd.Series, q: float) -> float:
    values = values.dropna()
    return float(np.percentile(values, q)) if len(values) else float("nan")


def _hit_rate(ok: pd.DataFrame) -> float:
    if "cached_tokens" not in ok:
        return float("nan")
    known = ok[ok["cached_tokens"].notna() & ok["prompt_tokens"].notna()]
    prompt = float(known["prompt_tokens"].sum())
    return float(known["cached_tokens"].sum()) / prompt if prompt > 0 else float("nan")


def replay_summary(
    requests: pd.DataFrame, *, max_lateness_ms: float, prompt_method: str
) -> tuple[pd.DataFrame, list[str]]:
    """One summary row of a replay's requests, and the warnings that go with it."""
    ok = requests[requests["outcome"].eq("ok")]
    counted = ok[ok["output_tokens"].notna()]  # a count the server did not report is unknown, not a miss
    reachable = ok[ok["prompt_reachable"] & ok["prompt_tokens"].notna()]
    sent = requests[requests["sent_s"].notna()]
    n_ok = len(ok)
    duration_s = float(requests["end_s"].max() - sent["sent_s"].min()) if len(sent) else float("nan")
    span_s = float(requests["arrival_s"].max() - requests["arrival_s"].min())
    row: dict[str, Any] = {
        "requests": len(requests),
        "sent": len(sent),
        "ok": n_ok,
        "failed": int(requests["outcome"].eq("error").sum()),
        "not_sent": int(requests["outcome"].eq("not_sent").sum()),
        "output_exact_share": float(counted["output_exact"].mean()) if len(counted) else float("nan"),
        "prompt_exact_share": float(reachable["prompt_exact"].mean()) if len(reachable) else float("nan"),
        "prompt_unreachable": int((~requests["prompt_reachable"]).sum()),
        "prompt_tokens_error_mean": float(
            (reachable["prompt_tokens"] - reachable["prompt_tokens_target"]).abs().mean()
        ),
        "duration_s": duration_s,
        "offered_rps": len(sent) / span_s if span_s > 0 else float("nan"),
        "achieved_rps": n_ok / duration_s if duration_s > 0 else float("nan"),
        "output_tok_s": float(ok["output_tokens"].sum()) / duration_s
        if duration_s > 0 and len(counted) == n_ok
        else float("nan"),
        "output_unknown": n_ok - len(counted),
        "prompt_unknown": int(ok["prompt_tokens"].isna().sum()),
        "cached_tokens": float(ok["cached_tokens"].sum()) if "cached_tokens" in ok else float("nan"),
        # the share of prompt tokens the server reported reused, over the answers that report both counts
        "prefix_hit_rate": _hit_rate(ok),
    }
    for metric in ("ttft", "tpot", "e2e"):
        for q in _PERCENTILES:
            row[f"{metric}_p{q}_ms"] = _percentile(ok[f"{metric}_ms"], q)
    row["itl_p50_ms"] = _percentile(ok["itl_ms_p50"], 50) if "itl_ms_p50" in ok else float("nan")
    row["itl_max_ms"] = float(ok["itl_ms_max"].max()) if "itl_ms_max" in ok and n_ok else float("nan")
    lateness = sent["lateness_ms"]
    row["lateness_p50_ms"] = _percentile(lateness, 50)
    row["lateness_p99_ms"] = _percentile(lateness, 99)
    row["lateness_max_ms"] = float(lateness.max()) if len(lateness) else float("nan")
    row["late_sends"] = int((lateness > max_lateness_ms).sum())
    row["fell_behind"] = bool(row["lateness_p99_ms"] > max_lateness_ms)
    out = _warnings(row, prompt_method, max_lateness_ms)
    if row["output_unknown"]:
        out.append(f"output_tokens are unknown (NaN) where {unknown_output(ok)}; output_exact_share and "
                   "output_tok_s leave them out")  # fmt: skip
    if row["prompt_unknown"]:
        out.append(f"{row['prompt_unknown']} of {n_ok} answers carried no usage.prompt_tokens: their prompt "
                   "lengths are unknown (NaN) and unchecked")  # fmt: skip
    return pd.DataFrame([row]), out


def _warnings(row: dict[str, Any], prompt_method: str, max_lateness_ms: float) -> list[str]:
    out = []
    if row["fell_behind"]:
        out.append(
            f"the client fell behind: p99 lateness {row['lateness_p99_ms']:.0f} ms > {max_lateness_ms:g} ms, "
            "so the server saw a smoother trace than the one given"
        )
    if row["failed"] or row["not_sent"]:
        out.append(f"{row['failed']} requests failed and {row['not_sent']} were not sent (see requests.error)")
    if row["ok"] and row["output_exact_share"] < 0.95:
        out.append(
            f"only {row['output_exact_share']:.0%} of requests got their exact output length: the server "
            "may ignore ignore_eos/min_tokens, or the context is too short"
        )
    if row["prompt_exact_share"] < 0.95:
        out.append(
            f"only {row['prompt_exact_share']:.0%} of requests got their prompt length (mean miss "
            f"{row['prompt_tokens_error_mean']:.1f} tokens): the server's token counts do not match its calibration"
        )
    if row["prompt_unreachable"]:
        out.append(
            f"{row['prompt_unreachable']} requests asked for fewer prompt tokens than the chat template's own "
            "plus one word; they were sent with one word"
        )
    if prompt_method != "tokenize":
        out.append("the server has no /tokenize: prompt lengths come from a fitted words-to-tokens line")
    if 0 < row["ok"] < _FEW_REQUESTS:
        out.append(f"percentiles rest on {row['ok']} requests: a p99 among so few is close to the maximum")
    return out
