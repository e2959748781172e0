"""The report's "Capacity at the SLO" section: measured against predicted capacity, the latency percentiles
against the rate with the SLO lines, which SLO binds first, and the search's time against its budget."""

from __future__ import annotations

import html
import math
from pathlib import Path

import altair as alt
import pandas as pd

from toolkit._report.blocks import _chart_html, _Section, _table_html
from toolkit._report.capacity import (
    AGREEMENT,
    CAPACITY_SEARCH,
    CAPACITY_WORKLOAD,
    CSV,
    PAIRED,
    SEARCH_QUANTILES,
    SEARCH_REPLICAS,
    SLO_MULTIPLES,
    START_SHARE,
    STRICT,
    CapacityRun,
    capacity_error,
    capacity_steps,
    search_spread_rps,
)
from toolkit._report.panels import BAR_COLOR, HEIGHT, WIDTH

__all__: list[str] = []

SLUG = "capacity"
_NAMES = {"ttft": "TTFT", "tpot": "TPOT"}
_SOURCES = {"measured": BAR_COLOR, PAIRED: "#E65100", "predicted": "#FFB74D", STRICT: "#9E9E9E"}


def capacity_chart(steps: pd.DataFrame, slos_ms: dict[str, float]) -> alt.HConcatChart:
    """Each metric's percentile against the step's rate, the measured search's steps and their simulated
    twins as points (filled: measured; shape: passed) and the steady-state predictions as lines, with the
    metric's SLO as a dashed rule; one panel per metric."""
    panels = []
    for metric, slo in slos_ms.items():
        df = steps[["source", "rate_rps", f"{metric}_q_ms", "passed"]].rename(columns={f"{metric}_q_ms": "ms"})
        # a log axis: the unfinished (inf) and the one-token answers' TPOT (0) have no place on it
        df = df[df["ms"].map(math.isfinite) & df["ms"].gt(0)].sort_values(["source", "rate_rps"])
        colour = alt.Color(
            "source:N", title="search", scale=alt.Scale(domain=list(_SOURCES), range=list(_SOURCES.values()))
        )
        x = alt.X("rate_rps:Q", title="arrival rate (req/s)")
        y = alt.Y("ms:Q", title=f"{_NAMES[metric]} percentile (ms)", scale=alt.Scale(type="log"))
        tips = ["source", alt.Tooltip("rate_rps", format=".3g"), alt.Tooltip("ms", format=".4g"), "passed"]
        searched = df["source"].isin(["measured", PAIRED])
        lines = alt.Chart(df[~searched]).mark_line(point=True).encode(x, y, colour, tooltip=tips)
        shape = alt.Shape("passed:N", title="step passed")
        points = [
            alt.Chart(df[df["source"].eq(source)])
            .mark_point(size=70, filled=source == "measured")
            .encode(x, y, colour, tooltip=tips, shape=shape)
            for source in ("measured", PAIRED)
        ]
        rule = alt.Chart(pd.DataFrame({"slo": [slo]})).mark_rule(strokeDash=[6, 3], color="#C62828").encode(y="slo:Q")
        title = f"{_NAMES[metric]}: SLO {slo:g} ms"
        panels.append(alt.layer(lines, *points, rule).properties(width=WIDTH, height=HEIGHT, title=title))
    return alt.hconcat(*panels).resolve_scale(y="independent")


def capacity_section(cap: CapacityRun, out: Path, *, refused: str = "") -> _Section:
    """The section (module docstring); writes ``capacity.csv`` (every step of every search) and the chart.
    ``refused``: why the trust check presents no fit (the prediction is then shown as indicative)."""
    steps = capacity_steps(cap)
    steps.to_csv(out / CSV, index=False)
    chart = _chart_html(capacity_chart(steps, cap.slos_ms), SLUG, out)
    m = cap.measured.summary.iloc[0]
    paired = cap.paired.summary.iloc[0]
    p = cap.predicted.summary.iloc[0]
    strict = cap.predicted_strict.summary.iloc[0]
    median, low, high = search_spread_rps(cap)
    rows = [
        {"search": "measured", "percentile": m["percentile"], "capacity_rps": m["capacity_rps"],
         "first_failing_rps": m["failed_rps"], "interval_low_rps": m["interval_low_rps"],
         "interval_high_rps": m["interval_high_rps"], "binding_slo": m["binding_slo"], "steps": m["steps"],
         "requests_per_step": m["requests_per_step"], "wall_s": m["wall_s"], "budget_s": m["budget_s"]},
        {"search": "predicted, the measured search on its own requests", "percentile": paired["percentile"],
         "capacity_rps": paired["capacity_rps"], "first_failing_rps": paired["failed_rps"],
         "binding_slo": paired["binding_slo"], "steps": paired["steps"],
         "requests_per_step": paired["requests_per_step"], "budget_s": paired["budget_s"]},
        *({"search": name, "percentile": s["percentile"], "capacity_rps": s["capacity_rps"],
           "first_failing_rps": s["failed_rps"], "binding_slo": s["binding_slo"],
           "ttft_alone_rps": s["ttft_alone_rps"], "tpot_alone_rps": s["tpot_alone_rps"], "steps": s["steps"],
           "requests_per_step": s["requests_per_step"], "wall_s": s["wall_s"]}
          for name, s in (("predicted", p), (STRICT, strict))),
        {"search": f"predicted, the measured search with {SEARCH_REPLICAS} other seeds", "percentile": m["percentile"],
         "capacity_rps": median, "interval_low_rps": low, "interval_high_rps": high,
         "requests_per_step": m["requests_per_step"]},
    ]  # fmt: skip
    words = [capacity_sentence(cap, refused=refused)]
    body = (
        "<p>" + html.escape(" ".join(words)) + "</p>" + chart + "<p>" + html.escape(_method(cap)) + "</p>"
        + _table_html(pd.DataFrame(rows), "Measured and predicted capacity", CSV)
        + _table_html(steps, "Every step of the four searches", CSV)
    )  # fmt: skip
    return _Section("Capacity at the SLO", body)


def capacity_sentence(cap: CapacityRun, *, refused: str = "") -> str:
    """The section's verdict in words, also the conclusion's: measured against predicted, which SLO
    binds, and the search's time against its budget. With ``refused`` (the trust check presents no fit
    from this run) the prediction is named indicative and not judged against the 15%."""
    m = cap.measured.summary.iloc[0]
    paired = cap.paired.summary.iloc[0]["capacity_rps"]
    _, low, high = search_spread_rps(cap)
    slos = " and ".join(f"{_NAMES[k]} p{m['percentile']:g} within {v:g} ms" for k, v in cap.slos_ms.items())
    if not math.isfinite(m["capacity_rps"]):
        measured = f"no rate passed (the lowest tried, {m['failed_rps']:.3g} req/s, failed)"
    elif not math.isfinite(m["failed_rps"]):
        measured = f"at least {m['capacity_rps']:.3g} req/s (no rate tried failed)"
    else:
        measured = f"{m['capacity_rps']:.3g} req/s (the first failing rate {m['failed_rps']:.3g} req/s)"
    error = capacity_error(cap)
    verdict = (
        ""
        if not math.isfinite(error)
        else f", {error:+.0%}: {'within' if abs(error) <= AGREEMENT else 'outside'} {AGREEMENT:.0%}"
    )
    if math.isfinite(error) and m["failed_rps"] > (1 + AGREEMENT) * m["capacity_rps"]:
        inside = m["capacity_rps"] <= paired <= m["failed_rps"]
        verdict += (
            f" (the search's bracket is wider than {AGREEMENT:.0%}: the capacity lies anywhere in it, so the"
            f" comparison cannot resolve {AGREEMENT:.0%}; the prediction lies {'inside' if inside else 'outside'} it)"
        )
    if refused:
        verdict = ", indicative only: the fit on this run's profile is not presented (see above)"
    binds = f"; {_NAMES.get(m['binding_slo'], m['binding_slo'])} binds first" if m["binding_slo"] else ""
    stopped = " and stopped at its budget, keeping every step measured" if m["stopped_early"] else ""
    spread = (
        f"with {SEARCH_REPLICAS} other seeds {SEARCH_QUANTILES[1] - SEARCH_QUANTILES[0]:.0%} of its runs land"
        f" between {low:.3g} and {high:.3g}"
    )
    return (
        f"Capacity at {slos}: measured {measured}{binds}; predicted {paired:.3g} req/s by the model"
        f" calibrated on the profile (this search simulated on the same requests; {spread})"
        f"{verdict}. The search took {m['wall_s']:.0f} s of its {m['budget_s']:.0f} s budget{stopped}."
    )


def _method(cap: CapacityRun) -> str:
    m = cap.measured.summary.iloc[0]
    p = cap.predicted.summary.iloc[0]
    strict = cap.predicted_strict.summary.iloc[0]
    rule = ", ".join(
        f"{_NAMES[k]} {SLO_MULTIPLES[k]:g} x its unloaded {cap.unloaded_ms[k]:.3g} ms" for k in cap.slos_ms
    )
    alone = ", ".join(f"{_NAMES[k]} at {p[f'{k}_alone_rps']:.3g} req/s" for k in cap.slos_ms)
    return (
        f"The SLO pair is the calibrated model's unloaded latency of one request of the workload"
        f" ({CAPACITY_WORKLOAD['prompt_tokens']} prompt tokens as the server counts them,"
        f" {CAPACITY_WORKLOAD['output_tokens']} output tokens) times a stated multiple: {rule}. Alone, each SLO"
        f" binds (predicted) at {alone}. The search is open loop (Poisson arrivals): bracket by doubling from"
        f" {START_SHARE:g} x the prediction, bisect to {CAPACITY_SEARCH['rel_tolerance']:.0%}, then confirm."
        f" The report's time budget ({m['budget_s']:.0f} s) cut it: {m['requests_per_step']:.0f} measured requests"
        f" a step where the p99 rule asks {m['rule_requests']:.0f} (so a step's p99 is its slowest request, whose"
        f" median is the {p['percentile']:.3g}th percentile) and {CAPACITY_SEARCH['repeats']} step at the last"
        f" passing rate rather than 2."
        f" The multiples put the capacity at the knee of the latency curve, where a rate a tenth too high fails"
        f" by more than a step's sampling error, so the number follows the server's service rate. A short step"
        f" also starts from an idle server and ends before a queue near capacity has grown to its steady state,"
        f" so such a search finds a higher rate than a long one: the prediction compared is this same search"
        f" (its steps, repeats, tolerance, first rate, budget and seed, so each step's requests are those the"
        f" measured step at that rate sent) simulated on the calibrated model. The"
        f" measured interval is where the capacity lies allowing for each percentile's sampling error (the"
        f" highest rate that passed clearly, the lowest that failed clearly; blank where no step was that"
        f" clear). At steady state (2000 simulated requests a step) the model predicts"
        f" {p['capacity_rps']:.3g} req/s at the {p['percentile']:.3g}th percentile and"
        f" {strict['capacity_rps']:.3g} req/s at the true p99, the stricter number a long search would"
        f" approach. Search ended: {m['reason']}."
    )
