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
    mixed_prompt_tokens: tuple[int, ...] = (),
    mixed_batch_sizes: tuple[int, ...] = (),
) -> pd.DataFrame:
    """One row per wave, repeats interleaved: ``cell``, ``repeat``, ``batch``,
    ``prompt_tokens_target``, ``output_tokens_target``, and the wave's ``requests``, ``prompt_sent``
    and ``output_sent`` (tokens asked for over all its requests). A ``mixed`` wave is ``batch``
    streams of ``context_tokens[0]`` prompt and ``output_tokens`` output tokens, then one prompt of
    ``prompt_tokens_target`` tokens and one output token while they decode."""
    cells = [("decode", 1, c, output_tokens) for c in dict.fromkeys(context_tokens)]
    cells += [("batch", b, context_tokens[0], output_tokens) for b in dict.fromkeys(batch_sizes) if b > 1]
    cells += [("prefill", 1, p, 1) for p in dict.fromkeys(prompt_tokens)]
    mixed = [(p, b) for p in dict.fromkeys(mixed_prompt_tokens) for b in dict.fromkeys(mixed_batch_sizes)]
    cells += [("mixed", b, p, output_tokens) for p, b in mixed]
    rows = [(name, r, b, p, o) for r in range(repeats) for name, b, p, o in cells]
    frame = pd.DataFrame(rows, columns=["cell", "repeat", "batch", "prompt_tokens_target", "output_tokens_target"])
    is_mixed = frame["cell"].eq("mixed")
    frame["requests"] = frame["batch"] + is_mixed
    frame["prompt_sent"] = np.where(
        is_mixed,
        frame["batch"] * context_tokens[0] + frame["prompt_tokens_target"],
        frame["batch"] * frame["prompt_tokens_target"],
    )
    frame["output_sent"] = frame["batch"] * frame["output_tokens_target"] + is_mixed
    return frame


def wave_requests(cell: str, batch: int, prompt: int, output: int, stream_prompt: int, delay_s: float) -> pd.DataFrame:
    """The requests of one wave: ``role`` (``stream``: decodes; ``prompt``: measured by its TTFT),
    ``prompt_tokens``, ``output_tokens`` and ``arrival_s`` (s after the wave starts). A ``mixed``
    wave's prompt arrives ``delay_s`` after its ``batch`` streams of ``stream_prompt`` tokens."""
    if cell == "mixed":
        return pd.DataFrame(
            {
                "role": ["stream"] * batch + ["prompt"],
                "prompt_tokens": [stream_prompt] * batch + [prompt],
                "output_tokens": [output] * batch + [1],
                "arrival_s": [0.0] * batch + [delay_s],
            }
        )
    role = "prompt" if cell == "prefill" else "stream"
    return pd.DataFrame({"role": role, "prompt_tokens": prompt, "output_tokens": output, "arrival_s": np.zeros(batch)})


def mixed_delay_s(rows: list[dict], batch: int, phase: float) -> float:
    """When a mixed wave's prompt is sent (s after its streams): after the streams' own prefill and
    ``3 + phase`` decode steps, read from the profile's decode or batch cell of the nearest batch (the
    smallest at or above ``batch``, else the largest) measured so far; 1 s before any is. ``phase``
    (drawn in [0, 1) per wave) puts the prompt's arrival anywhere in a step, so that its wait for the
    running step is half a step on average, as the calibration assumes, not locked to the steps."""
    done = pd.DataFrame([r for r in rows if r.get("cell") in ("decode", "batch") and r.get("outcome") == "ok"])
    if done.empty:
        return 1.0
    sizes = np.sort(done["batch"].unique())
    nearest = sizes[sizes >= batch][0] if (sizes >= batch).any() else sizes[-1]
    cell = done[done["batch"].eq(nearest)]
    ttft_s = float(cell["ttft_ms"].max()) / 1e3 * batch / nearest
    step_s = float(cell["itl_ms_p50"].fillna(cell["tpot_ms"]).median()) / 1e3
    return ttft_s + (3 + phase) * step_s if np.isfinite(ttft_s + step_s) else 1.0


def cell_metric_ms(frame: pd.DataFrame) -> np.ndarray:
    """What each profile request measures of its cell, in ms: TTFT for a prefill; a mixed cell's
    streams their longest inter-token gap (the step that prefilled the prompt beside them), its prompt
    NaN (its TTFT also holds where in a step it arrived); else the decode step (the median
    inter-token gap, or the TPOT where that is missing)."""
    step = frame["itl_ms_p50"].fillna(frame["tpot_ms"]) if "itl_ms_p50" in frame else frame["tpot_ms"]
    mixed = frame["cell"].eq("mixed")
    longest = frame["itl_ms_max"].where(frame["role"].eq("stream")) if mixed.any() else np.nan
    return np.where(frame["cell"].eq("prefill"), frame["ttft_ms"], np.where(mixed, longest, step)).astype(float)


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
    measures = np.where(cells["cell"].eq("mixed"), "ITL (longest gap)", "ITL (median gap)")
    cells.insert(3, "measures", np.where(cells["cell"].eq("prefill"), "TTFT", measures))
    return cells
