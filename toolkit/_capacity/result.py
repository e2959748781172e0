"""What a capacity search returns: every step and a one-row summary."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from toolkit._capacity.search import Outcome
from toolkit._capacity.spec import Spec

__all__ = ["CapacityResult"]


@dataclass(frozen=True)
class CapacityResult:
    """The outcome of :func:`toolkit.find_capacity` or :func:`toolkit.predict_capacity`.

    Attributes
    ----------
    steps : pandas.DataFrame
        One row per step, in the order run (``q`` stands for the percentile asked, e.g. ``p99``):
        ``step`` (0, 1, ...), ``phase`` (``bracket``, ``bisect`` or ``repeat``: a confirmation of the
        last passing rate), ``rate_rps`` (the scheduled arrival rate), ``seed`` (of its arrivals and
        lengths), ``requests`` (measured: after the warm-up, the first tenth sent), ``finished``
        (of those, finished before the step stopped waiting), ``offered_rps`` (arrivals per second
        of the measured requests' span), ``achieved_rps`` (finished requests per second, first
        measured arrival to last completion), ``ttft_q_ms``, ``tpot_q_ms``, ``e2e_q_ms`` (the
        percentile: the order statistic of rank ``ceil(q n)``, an unfinished request counting as
        infinitely slow), ``ttft_q_low_ms`` ... ``e2e_q_high_ms`` (its distribution-free 95%
        confidence bounds, from the binomial law of order statistics; -inf/inf where the sample is
        too small to bound), ``goodput_rps`` (requests per second that finished within every SLO
        given), ``ttft_growth`` (seconds of TTFT gained per second of arrivals, first third of the
        finished requests to the last: the simulator's ``queue_wait_growth`` on the measured TTFT),
        ``stable`` (growth at most ``UNSTABLE_GROWTH``, 0.05; None with too few requests),
        ``passed`` (every SLO's percentile within it and the queue not unstable), ``clear_pass``
        (passed with every SLO's upper bound within it too), ``clear_fail`` (some SLO's lower bound
        above it, or unstable), ``failed_metric`` (``ttft``, ``tpot``, ``e2e`` furthest over its
        SLO, ``queue`` for an unstable queue alone, None when passed), ``excess`` (that metric's
        percentile over its SLO, minus 1: 0.2 is 20% over; NaN when passed), ``reason`` (every failure in words:
        metric, value, SLO and margin, or the queue's growth; empty when passed), ``end_s`` (when the
        step stopped waiting for its requests, s from its start) and ``wall_s``.
        A measured step adds ``client_fell_behind`` (the client sent late, see
        :func:`toolkit.replay_trace`) and ``errors`` (requests that failed, were cancelled at the step's end or were not sent).
    summary : pandas.DataFrame
        One row: ``capacity_rps`` (the last rate that passed every one of its steps; NaN when none
        did), ``failed_rps`` (the first rate above it that failed; NaN when none did),
        ``interval_low_rps`` and ``interval_high_rps`` (where the capacity lies allowing for the
        percentiles' sampling error: the highest rate at or below ``capacity_rps`` whose every step
        passed clearly, the lowest rate whose step failed clearly; NaN where no step was that
        clear), ``binding_slo`` (the metric that failed at ``failed_rps``: ``ttft``, ``tpot``,
        ``e2e`` or ``queue``), ``percentile``, ``slo_ttft_ms``, ``slo_tpot_ms``, ``slo_e2e_ms``
        (NaN where not given), ``steps``, ``requests_per_step`` (measured requests a step),
        ``rule_requests`` (the fewest the percentile needs, see ``toolkit._capacity.rule``),
        ``wall_s`` (the whole search; a prediction's own computing time), ``budget_s`` (inf for a
        prediction given none), ``stopped_early`` and ``reason`` (how the search ended). :func:`toolkit.predict_capacity` adds ``ttft_alone_rps``,
        ``tpot_alone_rps`` and ``e2e_alone_rps``: the capacity with that SLO alone (NaN for an SLO
        not given).
    params : dict
        The search's settings.
    warnings : tuple of str
        What a reader must know before trusting the number.
    """

    steps: pd.DataFrame
    summary: pd.DataFrame
    params: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def __repr__(self) -> str:
        s = self.summary.iloc[0]
        return (
            f"CapacityResult(capacity {s['capacity_rps']:.4g} req/s, first failing {s['failed_rps']:.4g} req/s, "
            f"binding {s['binding_slo']}, {len(self.steps)} steps in {s['wall_s']:.3g} s"
            f"{', stopped early' if s['stopped_early'] else ''})"
        )


def build_result(
    outcome: Outcome, spec: Spec, *, wall_s: float, budget_s: float, params: dict, warnings: list[str]
) -> CapacityResult:
    """The result of a finished (or stopped) search."""
    steps = pd.DataFrame(outcome.rows)
    if len(steps):
        steps.insert(0, "step", range(len(steps)))
        steps["failed_metric"] = steps["failed_metric"].astype(object)
    capacity, failed = outcome.capacity_rps, outcome.failed_rps
    binding = None
    interval_low = interval_high = math.nan
    if len(steps):
        at_failed = steps[steps["rate_rps"].eq(failed) & ~steps["passed"]]
        binding = at_failed["failed_metric"].iloc[0] if len(at_failed) else None
        by_rate = steps.groupby("rate_rps")
        clear_ok = by_rate["clear_pass"].all()
        below = clear_ok[clear_ok & (clear_ok.index <= capacity)] if not math.isnan(capacity) else clear_ok.iloc[0:0]
        interval_low = float(below.index.max()) if len(below) else math.nan
        clear_bad = steps.loc[steps["clear_fail"], "rate_rps"]
        interval_high = float(clear_bad.min()) if len(clear_bad) else math.nan
    summary = {
        "capacity_rps": capacity,
        "failed_rps": failed,
        "interval_low_rps": interval_low,
        "interval_high_rps": interval_high,
        "binding_slo": binding,
        "percentile": spec.percentile,
        **{f"slo_{m}_ms": spec.slos.get(m, math.nan) for m in ("ttft", "tpot", "e2e")},
        "steps": len(steps),
        "requests_per_step": spec.min_requests,
        "rule_requests": spec.rule_requests,
        "wall_s": wall_s,
        "budget_s": budget_s,
        "stopped_early": outcome.stopped_early,
        "reason": outcome.reason,
    }
    if spec.min_requests < spec.rule_requests:
        warnings.append(
            f"steps measure {spec.min_requests} requests, fewer than the {spec.rule_requests} the "
            f"p{spec.percentile:g} needs for its 95% upper bound to be below the slowest request"
        )
    if outcome.stopped_early:
        warnings.append(f"the search stopped early ({outcome.reason})")
    return CapacityResult(steps=steps, summary=pd.DataFrame([summary]), params=params, warnings=tuple(warnings))
