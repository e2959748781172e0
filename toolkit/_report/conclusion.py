"""The report's opening in words, and the warning where percentiles rest on few requests.

The conclusion names what limits the measured server (the sweep's batching verdict at the top limit,
with how far its elasticity sits from the next band and how many runs it rests on), the peak decode
throughput and where it is, how many requests failed, and, where the serving model predicted the run,
how far off it still is on the levels it was not calibrated on.
"""

from __future__ import annotations

import pandas as pd

from toolkit._report.tiles import _peak, _throughput_shape, _tok
from toolkit._sweep.levels import NOISY_TOLERANCE

__all__: list[str] = []


# Outcomes whose stream completed: the attempts the levels' percentiles are taken over.
ANSWERED = ("ok", "rejected")


# The verdict's elasticity bands (toolkit._sweep.levels): batching up to 0.3, queueing from 0.7.
BANDS = (0.3, 0.7)


VERDICT_MEANING = {
    "batching": "it batches, running the lanes side by side at nearly their single-lane speed",
    "mixed": "it batches only in part, so added lanes buy throughput but slow each other down",
    "queueing": "it queues, running the lanes largely one at a time, so added concurrency becomes waiting",
}


METRICS = {"dec_tok_s": ("decode throughput", "tokens/s"), "tpot_ms": ("TPOT", "ms"), "ttft_ms": ("TTFT", "ms")}


# Upper percentiles warned about; p of n values (linear interpolation) lies between the two largest
# exactly when n * (100 - p) <= 200 - p: up to 21 requests for p95, 101 for p99.
TAIL_PERCENTILES = (95, 99)


def conclusion(levels: pd.DataFrame, lanes: pd.DataFrame | None = None, accuracy: pd.DataFrame | None = None) -> str:
    """The report's conclusion: what limits the server, its verdict and how sure, failures, model error.

    Parameters
    ----------
    levels : pandas.DataFrame
        Sweep levels: ``in_flight``, ``dec_tok_s`` (tokens/s), and where present ``verdict``,
        ``elasticity``, ``llm_ms_per_token`` (ms), ``repeats``, ``dec_tok_s_ci95`` (tokens/s) and
        ``lanes_failed``.
    lanes : pandas.DataFrame, optional
        Lane attempts: ``in_flight``, ``outcome`` (ok, rejected or error), ``error`` and ``final``;
        failures are counted from ``levels`` when omitted.
    accuracy : pandas.DataFrame, optional
        A predicted-against-measured check (``llamacpp_closed_loop_check``): ``calibration`` (the last
        one named is the calibrated prediction), ``split`` (fit or holdout), ``in_flight``, ``metric``,
        ``rel_err`` (predicted / measured - 1) and optionally ``predicted``, ``measured``.

    Returns
    -------
    str
        Plain text (not HTML): one line per finding (throughput, verdict, failures, model error),
        each a sentence or two.
    """
    df = levels.sort_values("in_flight").reset_index(drop=True)
    parts = [_throughput(df), _verdict(df), _failures(df, lanes)]
    if accuracy is not None and len(accuracy):
        parts.append(_accuracy(accuracy))
    return "\n".join(p for p in parts if p)


def _throughput(df: pd.DataFrame) -> str:
    peak, first, top = _peak(df), df.iloc[0], df.iloc[-1]
    if peak is None:
        return "No level produced a decode throughput: no request completed."
    where = int(peak["in_flight"])
    text = f"Decode throughput peaks at {_tok(peak['dec_tok_s'])} tokens/s at {where} in flight"
    if where != int(first["in_flight"]) and first["dec_tok_s"] > 0:
        gain = peak["dec_tok_s"] / first["dec_tok_s"]
        text += f", {gain:.1f}x the {_tok(first['dec_tok_s'])} tokens/s at {int(first['in_flight'])}"
    text += f"; {_throughput_shape(df)}"
    if where == int(top["in_flight"]) and len(df) > 1:
        text += ". That is the top limit tried, so the server's ceiling lies there or beyond"
    return text + "."


def _verdict(df: pd.DataFrame) -> str:
    if "verdict" not in df or len(df) < 2:
        return "With one in-flight limit, batching cannot be told from queueing." if len(df) < 2 else ""
    first, top = df.iloc[0], df.iloc[-1]
    verdict, limit = str(top["verdict"]), int(top["in_flight"])
    if verdict == "inconclusive" and "elasticity" in df and pd.notna(top["elasticity"]):
        why = (
            f"its repeats disagree (a standard deviation above {NOISY_TOLERANCE:.0%} of their median)"
            if "noisy" in df and bool(top["noisy"])
            else "its runs do not put the elasticity clearly on one side of a threshold"
        )
        return (
            f"What limits this server cannot be told from this sweep: at {limit} in flight the verdict is"
            f" inconclusive (elasticity {float(top['elasticity']):.2f}, where batching ends at {BANDS[0]:g} and"
            f" queueing begins at {BANDS[1]:g}), because {why}."
        )
    if verdict not in VERDICT_MEANING or "elasticity" not in df or pd.isna(top["elasticity"]):
        return f"The verdict at {limit} in flight is {verdict}: the lanes' time per token is not known at both ends."
    e = float(top["elasticity"])
    low, high = BANDS
    if verdict == "batching":
        gap = (low - e, "mixed")
    elif verdict == "queueing":
        gap = (e - high, "mixed")
    else:
        gap = min((e - low, "batching"), (high - e, "queueing"))
    text = f"What limits this server: {VERDICT_MEANING[verdict]}. At {limit} in flight the sweep reads {verdict}"
    if "llm_ms_per_token" in df and pd.notna(first["llm_ms_per_token"]) and pd.notna(top["llm_ms_per_token"]):
        text += (
            f": each lane's time per output token went from {first['llm_ms_per_token']:.1f} ms at"
            f" {int(first['in_flight'])} in flight to {top['llm_ms_per_token']:.1f} ms"
        )
    text += (
        f", elasticity {e:.2f} on a scale from 0 (perfect batching) to 1 (one lane at a time), where"
        f" {verdict} spans {_band(verdict)}. The reading is {gap[0]:.2f} from {gap[1]}"
    )
    repeats = int(df["repeats"].max()) if "repeats" in df and df["repeats"].notna().any() else 1
    if repeats < 2:
        text += ", from one run per level, so no interval can be put on it"
    else:
        text += f", from {repeats} runs per level"
        if "dec_tok_s_ci95" in df and pd.notna(top["dec_tok_s_ci95"]):
            text += f", and the top throughput's 95% interval is ±{_tok(top['dec_tok_s_ci95'])} tokens/s"
    lower = df.iloc[1:-1]
    if len(lower):
        readings = [f"{v} at {int(n)}" for v, n in zip(lower["verdict"], lower["in_flight"], strict=True)]
        text += "; the lower limits read " + ", ".join(readings)
    return text + "."


def _band(verdict: str) -> str:
    low, high = BANDS
    return {"batching": f"0 to {low:g}", "mixed": f"{low:g} to {high:g}", "queueing": f"{high:g} and above"}[verdict]


def _failures(df: pd.DataFrame, lanes: pd.DataFrame | None) -> str:
    if lanes is None or not len(lanes):
        if "lanes_failed" not in df:
            return ""
        failed = int(df["lanes_failed"].sum())
        return "No request failed." if failed == 0 else f"{failed} request{'s' * (failed != 1)} failed."
    finals = lanes[lanes["final"].astype(bool)] if "final" in lanes else lanes
    failed = finals[finals["outcome"] != "ok"]
    retried = len(lanes) - len(finals)
    retries = f", after {retried} retried attempt{'s' * (retried != 1)}" if retried else ""
    if not len(failed):
        return f"All {len(finals)} requests succeeded{retries or ', none retried'}."
    per_level = failed.groupby("in_flight").size().sort_index()
    where = ", ".join(f"{n} at {int(limit)} in flight" for limit, n in per_level.items())
    text = f"{len(failed)} of {len(finals)} requests failed ({where}){retries}"
    errors = lanes.loc[lanes["outcome"] == "error", "error"].dropna().astype(str) if "error" in lanes else []
    if len(errors):
        common = errors.value_counts()
        message = str(common.index[0])
        message = message if len(message) <= 80 else message[:77] + "..."
        text += f"; the most common error ({int(common.iloc[0])} attempts): {message}"
    return text + "."


def _accuracy(accuracy: pd.DataFrame) -> str:
    order = list(dict.fromkeys(accuracy["calibration"]))
    held = _held_out(accuracy, order[-1])
    if not len(held):
        return ""
    err = held["rel_err"].abs()
    worst = held.loc[err.idxmax()]
    name, unit = METRICS.get(str(worst["metric"]), (str(worst["metric"]), ""))
    limits = " and ".join(str(int(n)) for n in sorted(held["in_flight"].unique()))
    side = "high" if worst["rel_err"] > 0 else "low"
    text = (
        f"After calibration ({order[-1]}), the serving model is still off by up to {err.max():.0%} on the"
        f" held-out levels ({limits} in flight): it predicts {name} at {int(worst['in_flight'])} in flight"
        f" {abs(worst['rel_err']):.0%} too {side}"
    )
    if {"predicted", "measured"} <= set(held.columns):
        text += f" ({worst['predicted']:,.4g} {unit} against {worst['measured']:,.4g} measured)"
    text += f", and its median error there is {err.median():.0%}"
    if len(order) > 1:
        before = _held_out(accuracy, order[0])["rel_err"].abs()
        named = "" if order[0] == "none" else f" ({order[0]})"
        text += f"; uncalibrated{named} it was off by up to {before.max():.0%}"
    return text + "."


def _held_out(accuracy: pd.DataFrame, calibration: str) -> pd.DataFrame:
    rows = accuracy[(accuracy["calibration"] == calibration) & accuracy["rel_err"].notna()]
    return rows[rows["split"] == "holdout"] if "split" in rows else rows


def request_counts(levels: pd.DataFrame, lanes: pd.DataFrame | None) -> pd.Series:
    """Answered requests (outcome ok or rejected) per in-flight limit: what each level's percentiles rest on.

    From ``lanes`` when given, else the levels' ``lanes_ok``; indexed by ``in_flight``, ascending.
    """
    limits = sorted(levels["in_flight"].unique())
    if lanes is not None and "outcome" in lanes:
        answered = lanes[lanes["outcome"].isin(ANSWERED)]
        return answered.groupby("in_flight").size().reindex(limits, fill_value=0).astype(int)
    if "lanes_ok" in levels:
        return levels.groupby("in_flight")["lanes_ok"].sum().reindex(limits).fillna(0).astype(int)
    return pd.Series(dtype=int)


def sample_note(counts: pd.Series) -> str:
    """A warning, in words, where p95 or p99 rest on so few requests that they are the largest value or close.

    Parameters
    ----------
    counts : pandas.Series
        Requests behind each level's percentiles, indexed by ``in_flight`` (``request_counts``).

    Returns
    -------
    str
        Plain text; empty when every level has enough requests (at least 102: p99 then lies below
        the second-largest value).
    """
    counts = counts[counts > 0].astype(int)
    groups: dict[tuple[str, ...], list[int]] = {}
    for n in sorted(set(counts)):
        weak = tuple(f"p{p}" for p in TAIL_PERCENTILES if n * (100 - p) <= 200 - p)
        if weak:
            groups.setdefault(weak, []).append(n)
    claims = [
        f"{' and '.join(weak)} from {' and '.join(map(str, ns))} requests {'are' if len(weak) > 1 else 'is'}"
        " the largest value or close to it"
        for weak, ns in groups.items()
    ]
    if not claims:
        return ""
    if counts.nunique() == 1:
        where = f"{int(counts.iloc[0])} answered requests at every level"
    else:
        where = ", ".join(f"{n} at {int(limit)} in flight" for limit, n in counts.items())
    return (
        f"Few requests behind the percentiles ({where}): {'; '.join(claims)}, lying between a level's two"
        " largest values. A p99 rests on more than the two slowest requests only from 102 requests per"
        " level, a p95 from 22."
    )
