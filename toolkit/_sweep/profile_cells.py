"""The cells of a profile (:func:`toolkit.profile`) and the test of whether a cell's repeats agree."""

from __future__ import annotations

import numpy as np
import pandas as pd

from toolkit._sweep.levels import disagree

__all__: list[str] = []


def design(
    *,
    context_tokens: tuple[int, ...],
    prompt_tokens: tuple[int, ...],
    batch_sizes: tuple[int, ...],
    output_tokens: int,
    repeats: int,
) -> pd.DataFrame:
    """One row per wave, repeats interleaved: ``cell``, ``repeat``, ``batch``,
    ``prompt_tokens_target``, ``output_tokens_target``."""
    cells = [("decode", 1, c, output_tokens) for c in dict.fromkeys(context_tokens)]
    cells += [("batch", b, context_tokens[0], output_tokens) for b in dict.fromkeys(batch_sizes) if b > 1]
    cells += [("prefill", 1, p, 1) for p in dict.fromkeys(prompt_tokens)]
    rows = [(name, r, b, p, o) for r in range(repeats) for name, b, p, o in cells]
    return pd.DataFrame(rows, columns=["cell", "repeat", "batch", "prompt_tokens_target", "output_tokens_target"])


def cell_metric_ms(frame: pd.DataFrame) -> np.ndarray:
    """What each profile request measures of its cell, in ms: TTFT for a prefill, else the decode
    step (its median inter-token gap, or its TPOT where that is missing)."""
    step = frame["itl_ms_p50"].fillna(frame["tpot_ms"]) if "itl_ms_p50" in frame else frame["tpot_ms"]
    return np.where(frame["cell"].eq("prefill"), frame["ttft_ms"], step).astype(float)


def mark_noisy(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``noisy``: the cell's per-wave medians of :func:`cell_metric_ms` disagree
    (:func:`toolkit._sweep.levels.disagree`). A cell with one wave is not noisy."""
    metric = cell_metric_ms(frame)
    keys = ["cell", "batch", "prompt_tokens_target"]
    per_wave = frame.assign(_m=metric).groupby([*keys, "wave"], dropna=False)["_m"].median()
    noisy = per_wave.groupby(level=[0, 1, 2], dropna=False).agg(disagree)
    out = frame.copy()
    out["noisy"] = noisy.reindex(pd.MultiIndex.from_frame(frame[keys])).fillna(False).to_numpy(dtype=bool)
    return out


def combine_passes(passes: list[pd.DataFrame]) -> pd.DataFrame:
    """One profile from profiles of the same design run at different times (:func:`toolkit.profile`
    frames, each of one or more passes): pass ``k``'s ``repeat`` and ``wave`` follow the previous
    pass's, and ``noisy`` is judged again over every wave of a cell.

    The fit counts a profile's passes as the host's speed samples (:mod:`toolkit._calibration.fit`):
    passes spread over a run rather than run back to back make that drift span the minutes another
    run would see. Each pass keeps its own ``seed``.
    """
    if not passes:
        raise ValueError("passes must hold at least one profile frame")
    frames, repeat, wave = [], 0, 0
    for frame in passes:
        frames.append(frame.assign(repeat=frame["repeat"] + repeat, wave=frame["wave"] + wave))
        repeat += int(frame["repeat"].max()) + 1
        wave += int(frame["wave"].max()) + 1
    return mark_noisy(pd.concat(frames, ignore_index=True))


def profile_cells(profile: pd.DataFrame) -> pd.DataFrame:
    """One row per profile cell: its waves, the median step (ITL) or TTFT, spread, noisy, busy waves."""
    df = profile.assign(measured_ms=cell_metric_ms(profile))
    per_wave = df.groupby(["cell", "batch", "prompt_tokens_target", "wave"], sort=False).agg(
        measured_ms=("measured_ms", "median"),
        busy=("busy", "first"),
        other=("other_cpu_share", "first"),
        ok=("outcome", lambda s: int(s.eq("ok").sum())),
        noisy=("noisy", "first"),
    )
    cells = per_wave.groupby(level=[0, 1, 2], sort=False).agg(
        waves=("measured_ms", "size"),
        requests_ok=("ok", "sum"),
        median_ms=("measured_ms", "median"),
        low_ms=("measured_ms", "min"),
        high_ms=("measured_ms", "max"),
        noisy=("noisy", "first"),
        busy_waves=("busy", "sum"),
        other_cpu_share_max=("other", "max"),
    )
    cells = cells.reset_index().rename(columns={"prompt_tokens_target": "prompt_tokens"})
    cells.insert(3, "measures", np.where(cells["cell"].eq("prefill"), "TTFT", "ITL (median gap)"))
    return cells
