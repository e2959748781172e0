"""Close the loop: measure the host, fit the serving model to a sweep, and score predictions.

``calibrate`` fits the one cost model's efficiencies to a sweep's or a profile's TTFT and TPOT (:mod:`.fit`);
``predict_sweep`` predicts a closed-loop sweep with the simulator; ``accuracy`` compares the two."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from toolkit._args import check_choice, check_int, check_number
from toolkit._calibration import fit as _fit
from toolkit._calibration.observations import is_profile, observations
from toolkit._calibration.outliers import OUTLIER_Z, cell_labels, screen
from toolkit._calibration.reference import combined_se, reference_rel_se
from toolkit._model.efficiency import MAX_TOKENS
from toolkit._model.memory import efficiency_value
from toolkit._model.serving import cost_model
from toolkit._model.validity import validity_range
from toolkit._queueing.simulator import check_breaks
from toolkit._vocab.keywords import positional_deprecated

__all__ = ["accuracy", "calibrate"]

# accuracy metric -> the level columns that may hold it (a sweep's levels, or a plain per-metric name)
_METRICS = {
    "dec_tok_s": ("dec_tok_s",),
    "ttft_ms": ("ttft_p50_ms", "ttft_ms"),
    "tpot_ms": ("tpot_p50_ms", "tpot_ms"),
}


def _gpu_name(gpu: object) -> str:
    if isinstance(gpu, pd.DataFrame) and "name" in gpu.columns:
        return str(gpu["name"].iloc[0])
    if isinstance(gpu, (pd.Series, Mapping)) and "name" in gpu:
        return str(gpu["name"])
    return str(gpu)


@positional_deprecated
def calibrate(
    lanes_or_levels: object,
    model: object,
    gpu: object,
    quant: object,
    *,
    tensor_parallel: int = 1,
    kv_dtype: object = "fp16",
    fit: Sequence[str] | None = None,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    prefill_breaks: Sequence[int] = (),
    prefill_start_breaks: Sequence[int] = (),
    robust: bool = False,
    ubatch_tokens: int | None = None,
) -> pd.DataFrame:
    """Fit the serving model's efficiencies to a sweep's measured TTFT and TPOT.

    Bounded least squares (``scipy.optimize.least_squares``) of the relative residuals
    ``predicted / measured - 1`` over every observation, predicted with ``CostModel.step_ms`` and
    ``CostModel.ttft_ms`` only. The mapping (details in :mod:`toolkit._calibration.fit`): a lane's TPOT is one
    decode step of ``b`` sequences at the lane's mean context (prompt plus half its output), ``b``
    being the number of requests in flight while it decoded (from the lanes' start and end times
    where recorded, else its level's achieved concurrency, summed inference time / wall clock, else
    ``min(in_flight, lanes)``). Its TTFT is the prefill of its uncached prompt
    (``prompt_tokens - cached_tokens``), in one step with the prompts that arrived with it and the
    sequences already decoding, plus half a decode step of waiting when others decode, plus the
    request overhead. Parameters the data cannot constrain (e.g. ``mbu`` when every step is
    compute-bound) stay where the fit started and report a NaN or large standard error.

    Parameters
    ----------
    lanes_or_levels : pandas.DataFrame or SweepResult
        ``SweepResult.lanes`` (one observation pair per finished lane attempt), ``SweepResult.levels``
        (one pair per level, from ``ttft_p50_ms`` / ``tpot_p50_ms`` and per-lane mean tokens) or a
        ``SweepResult`` (its lanes, with the achieved concurrency of its levels), or the frame of
        :func:`toolkit.profile` (TTFT of its single requests, TPOT of its decode and batch cells;
        noisy cells and failed requests left out).
    model, gpu, quant : str or spec
        As in :func:`toolkit.cost_model`; ``gpu`` may be a GPU name or the row of
        :func:`toolkit.measure_host`.
    tensor_parallel : int
        GPUs per replica.
    kv_dtype : str or spec
        KV-cache format.
    fit : sequence of str or None
        The parameters to fit, a subset of the tunable efficiencies (``mbu``, ``mfu``,
        ``step_overhead_ms``, ``request_overhead_ms``, ``serial_share``, ...); the others keep their
        defaults from ``data/efficiency.csv``. None fits ``mbu``, ``mfu``, ``step_overhead_ms`` and
        ``request_overhead_ms``, for a profile ``serial_share`` and ``batched_mbu_factor`` too, and
        for one with ``mixed`` cells ``masked_pair_share``.
    bounds : dict, optional
        ``{parameter: (low, high)}`` replacing the default bounds: utilisations in ``[0.001, 1]`` (MFU from
        ``0.0001``), overheads in ``[0, inf)`` ms.
    prefill_breaks : sequence of int
        The server's prefill breaks (offsets from a prompt's end, as in :func:`toolkit.simulate`):
        a TTFT is then predicted as the steps that prefill the prompt's chunks, as the server runs
        them (llama-server on a sliding-window model: ``toolkit._sweep.llama_server.SCHEDULING``).
        Empty (default): one step per prompt.
    prefill_start_breaks : sequence of int
        The server's breaks at positions from a prompt's start, counting its cached tokens, as in :func:`toolkit.simulate`
        (llama-server with context checkpoints: the start of the last user message, ``SCHEDULING``); each
        observation's own ``cached_tokens`` say whether its prefill crosses one.
    robust : bool
        Fit without the cells flagged as outliers (weight 0; see :mod:`toolkit._calibration.outliers`)
        instead of with every cell. Either way the flagged cells are named, with a warning.
    ubatch_tokens : int, optional
        Tokens per graph pass (1 to 10**9; None, the default: one pass), as in :func:`toolkit.simulate` (``SCHEDULING``).

    Returns
    -------
    pandas.DataFrame
        One row, accepted as ``calibration=`` by ``cost_model``, ``batching_curve``, ``ttft_ms``,
        ``simulate`` and ``plan``: ``mbu``, ``mfu`` (fractions), ``step_overhead_ms``,
        ``request_overhead_ms`` (ms); their standard errors ``mbu_se`` ... (same units, NaN where
        unconstrained): ``mbu_fit_se`` ... the fit's own (from a profile clustered by wave, with the
        drift between its passes added, see :mod:`toolkit._calibration.fit`), and ``mbu_se`` ... the
        standard error to compare runs by, the fit's with, for ``mbu`` and ``mfu``, the uncertainty
        of the measured rate they are shares of added (``mbu_reference_rel_se`` and
        ``mfu_reference_rel_se``, relative, from ``gpu``'s ``bandwidth_gb_s_se`` and
        ``fp16_tflops_se``; NaN, and nothing added, where ``gpu`` gives none; see
        :mod:`toolkit._calibration.reference`); ``residual_rms`` (RMS relative residual over all observations),
        ``ttft_residual_rms``, ``tpot_residual_rms``; ``n_obs``, ``n_ttft``, ``n_tpot``; ``fitted``
        (the names fitted and identified, comma-separated); ``held`` (names asked for but not
        identified: fitted to a bound, held at that bound; fit standard error above 25% of the value,
        or none, held at its default) and
        ``held_reason``; ``condition_number`` (of the Jacobian scaled by the parameters) and
        ``max_abs_correlation`` (between two fitted parameters); ``outlier_cells`` (the cells whose
        mean residual lies more than 5 standard deviations from the others', ``; ``-separated, judged
        on the robust fit) and ``robust``; the measured range, ``valid_prompt_tokens_min`` / ``_max``,
        ``valid_context_tokens_*`` and ``valid_batch_*`` (:mod:`toolkit._model.validity`: a
        prediction above it is flagged ``extrapolated``); ``model``, ``gpu``, ``quant``, ``tensor_parallel``,
        ``kv_dtype``. ``attrs["cell_residuals"]``: columns of a table, one row per cell (a profile's design point and
        kind, a sweep's level and kind) with ``observations``, ``residual_mean`` and ``residual_se``
        (relative residual at the robust fit), ``z`` (its standardized residual), ``outlier`` and
        ``weight`` (0 where the robust fit leaves the cell out).
    """
    if fit is None:
        mixed = is_profile(lanes_or_levels) and lanes_or_levels["cell"].eq("mixed").any()
        fit = _fit.MIXED_FIT if mixed else _fit.PROFILE_FIT if is_profile(lanes_or_levels) else _fit.DEFAULT_FIT
    fit = tuple(fit)
    if not fit:
        raise ValueError(f"fit must name at least one of {', '.join(_fit.PARAMETERS)}")
    for name in fit:
        check_choice("fit", name, _fit.PARAMETERS)
    limits = dict(_fit.BOUNDS)
    for name, pair in (bounds or {}).items():
        check_choice("bounds", name, _fit.PARAMETERS)
        low = check_number(f"bounds[{name!r}] low", pair[0], low=0)
        high = pair[1] if pair[1] == np.inf else check_number(f"bounds[{name!r}] high", pair[1], low=low)
        if not high > low:
            raise ValueError(f"bounds[{name!r}] must have low < high, got {pair!r}")
        limits[name] = (low, high)
    tensor_parallel = check_int("tensor_parallel", tensor_parallel, low=1)
    breaks = check_breaks(prefill_breaks)
    starts = check_breaks(prefill_start_breaks, "prefill_start_breaks")
    ubatch = None if ubatch_tokens is None else check_int("ubatch_tokens", ubatch_tokens, low=1, high=MAX_TOKENS)
    obs = observations(lanes_or_levels)

    base = cost_model(model, gpu, quant, tensor_parallel=tensor_parallel, kv_dtype=kv_dtype)
    defaults = {name: float(efficiency_value(name)) for name in _fit.PARAMETERS}
    for name in fit:  # a default outside user bounds would make an infeasible start
        low, high = limits[name]
        defaults[name] = float(np.clip(defaults[name], low, high))

    def build(**params):
        return cost_model(model, gpu, quant, tensor_parallel=tensor_parallel, kv_dtype=kv_dtype, **params)

    if not isinstance(robust, bool):
        raise ValueError(f"robust must be True or False, got {robust!r}")
    schedule = (breaks, starts, ubatch)
    first = _identified_fit(obs, build, defaults, fit, limits, *schedule)
    labels = cell_labels(obs)
    (result, held), cells = screen(
        labels,
        first,
        lambda kept: _identified_fit(obs[kept].reset_index(drop=True), build, defaults, fit, limits, *schedule),
        lambda params: _fit.residuals_at(obs, build(**params), *schedule)["residuals"],
    )
    outliers = cells[cells["outlier"]]
    flagged = outliers["cell"].tolist()
    if flagged:
        detail = ", ".join(f"{c} {m:+.0%}" for c, m in zip(flagged, outliers["residual_mean"], strict=True))
        action = (
            "the fit leaves them out" if robust else "they pull the fit; calibrate(..., robust=True) leaves them out"
        )
        warnings.warn(
            f"calibrate: {len(flagged)} cell(s) lie more than {OUTLIER_Z:g} standard deviations from the "
            f"others (mean relative residual {detail}): {action}",
            UserWarning,
            stacklevel=2,
        )
    if not robust:
        result, held = first
    row: dict[str, object] = dict(result.get("params", defaults))
    fit_se = {name: result["se"].get(name, np.nan) for name in _fit.PARAMETERS}
    rel = reference_rel_se(base)
    row.update({f"{name}_se": combined_se(row[name], fit_se[name], rel.get(name, np.nan)) for name in fit_se})
    row.update({f"{name}_fit_se": se for name, se in fit_se.items()})
    row.update({f"{name}_reference_rel_se": value for name, value in rel.items()})
    row["residual_rms"] = result["rms"]
    row["ttft_residual_rms"] = result["rms_by_kind"].get("ttft", np.nan)
    row["tpot_residual_rms"] = result["rms_by_kind"].get("tpot", np.nan)
    row["n_obs"] = len(obs)
    row["n_ttft"], row["n_tpot"] = (int((obs["kind"] == kind).sum()) for kind in ("ttft", "tpot"))
    row["fitted"] = ",".join(n for n in fit if n not in held)
    row["held"] = ",".join(held)
    row["held_reason"] = "; ".join(held.values())
    row["condition_number"] = result["condition_number"]
    row["max_abs_correlation"] = result["max_abs_correlation"]
    row.update(prefill_breaks=",".join(map(str, breaks)), prefill_start_breaks=",".join(map(str, starts)))
    row.update(validity_range(obs), outlier_cells="; ".join(flagged), robust=robust, model=base.model["name"])
    row.update(gpu=_gpu_name(gpu), quant=base.quant["name"], tensor_parallel=tensor_parallel)
    row["kv_dtype"] = base.kv_dtype["name"]
    out = pd.DataFrame([row])
    out.attrs["cell_residuals"] = cells.to_dict("list")  # columns: frames in attrs break pd.concat
    return out


def _identified_fit(
    obs, build, defaults, fit, limits, breaks=(), starts=(), ubatch=None
) -> tuple[dict[str, object], dict[str, str]]:
    """Fit, then hold every parameter the data do not identify, one at a time.

    A parameter is identified when it fitted inside its bounds and its standard error is at most
    ``MAX_RELATIVE_SE`` of its value: the fit's own standard error, without the uncertainty of the
    rate an efficiency is a share of (:mod:`toolkit._calibration.reference` says why). One that
    fitted to a bound is held there, first: the data say only that it is small (or large), and its
    linearised standard error describes a symmetric interval that the bound cuts off, so neither its
    value nor its interval can be compared with another run's. Holding it at that bound is the
    bounded fit's own solution, so the other parameters do not move (holding ``serial_share`` at its
    default 0.3 instead of the 1 a CPU profile fits moves ``mbu`` to its own bound and doubles the
    residuals). Otherwise the worst one (no standard error at all counts as worst) is
    held at its default and the rest refitted, until every fitted parameter is identified or none is
    left; a held parameter is never traded silently against another.
    """
    names, held, values = list(fit), {}, dict(defaults)
    while names:
        result = _fit.fit(obs, build, values, names, limits, breaks, starts, ubatch)
        params = result["params"]
        rel = {n: result["se"][n] / abs(params[n]) if params[n] else np.inf for n in names}
        bound = {n: side for n in names if (side := _at_bound(params[n], limits[n], defaults[n]))}
        loose = {n: r for n, r in rel.items() if not result["constrained"][n] or r > _fit.MAX_RELATIVE_SE or n in bound}
        if not loose:
            return result, held
        worst = max(loose, key=lambda n: np.inf if not result["constrained"][n] or n in bound else loose[n])
        if result["constrained"][worst] and worst in bound:
            side = bound[worst]
            values[worst] = float(limits[worst][0 if side == "lower" else 1])
            size = "small" if side == "lower" else "large"
            held[worst] = (
                f"{worst} held at its {side} bound {values[worst]:g}: it fitted there, so the data say only that it is {size}"
            )
        else:
            if not result["constrained"][worst] or np.isnan(rel[worst]):
                why = "the data do not constrain it"
            elif np.isinf(rel[worst]):
                why = "the data do not separate it from the other parameters (a singular fit)"
            else:
                why = f"its standard error is {rel[worst]:.0%} of its value"
            held[worst] = f"{worst} held at its default {defaults[worst]:g}: {why}"
        names.remove(worst)
    return {**_fit.residuals_at(obs, build(**values), breaks, starts, ubatch), "params": dict(values)}, held


def _at_bound(value: float, limits: tuple[float, float], default: float) -> str:
    """``lower`` or ``upper`` where a fitted ``value`` sits on that bound of ``limits``, else ''."""
    tolerance = 1e-6 * max(1.0, abs(default))
    if value <= limits[0] + tolerance:
        return "lower"
    if math.isfinite(limits[1]) and value >= limits[1] - tolerance:
        return "upper"
    return ""


def accuracy(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Compare predicted and measured sweep levels, metric by metric.

    Parameters
    ----------
    predicted, measured : pandas.DataFrame
        Level frames with ``in_flight`` and any of ``dec_tok_s`` (tokens/s), ``ttft_p50_ms`` (or
        ``ttft_ms``) and ``tpot_p50_ms`` (or ``tpot_ms``), e.g. ``SweepResult.levels`` and the
        levels of a prediction. Levels present in both are compared.

    Returns
    -------
    pandas.DataFrame
        One row per level and metric: ``in_flight``, ``metric`` (``dec_tok_s``, ``ttft_ms``,
        ``tpot_ms``), ``predicted``, ``measured`` (tokens/s or ms), ``rel_err`` =
        (predicted - measured) / measured (NaN where the measurement is missing or zero).
    """
    for argument, frame in (("predicted", predicted), ("measured", measured)):
        if not isinstance(frame, pd.DataFrame) or "in_flight" not in frame.columns:
            raise ValueError(f"{argument} must be a DataFrame of levels with an 'in_flight' column")
    rows = []
    for metric, candidates in _METRICS.items():
        p_col = next((c for c in candidates if c in predicted.columns), None)
        m_col = next((c for c in candidates if c in measured.columns), None)
        if p_col is None or m_col is None:
            continue
        both = pd.merge(
            predicted[["in_flight", p_col]].rename(columns={p_col: "predicted"}),
            measured[["in_flight", m_col]].rename(columns={m_col: "measured"}),
            on="in_flight",
        )
        both.insert(1, "metric", metric)
        rows.append(both)
    if not rows:
        raise ValueError("predicted and measured share no metric: give dec_tok_s, ttft_p50_ms or tpot_p50_ms in both")
    out = pd.concat(rows, ignore_index=True)
    out["predicted"] = out["predicted"].astype(float)
    out["measured"] = out["measured"].astype(float)
    meas = out["measured"].where(out["measured"] != 0)
    out["rel_err"] = (out["predicted"] - meas) / meas
    return out.sort_values(["metric", "in_flight"], kind="stable").reset_index(drop=True)
