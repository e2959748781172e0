"""The cells of a profile (:func:`toolkit.profile`) and the test of whether a cell's repeats agree."""

from __future__ import annotations

import numpy as np
import pandas as pd

from toolkit._sweep.levels import NOISY_TOLERANCE

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


def mark_noisy(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``noisy``: the cell's per-wave medians (median ITL, else TPOT, for decode and batch; TTFT for prefill)
    spread by more than ``NOISY_TOLERANCE`` of their median. A cell with one wave is not noisy."""
    step = frame["itl_ms_p50"].fillna(frame["tpot_ms"]) if "itl_ms_p50" in frame else frame["tpot_ms"]
    metric = np.where(frame["cell"].eq("prefill"), frame["ttft_ms"], step).astype(float)
    per_wave = (
        frame.assign(_m=metric)
        .groupby(["cell", "batch", "prompt_tokens_target", "wave"], dropna=False)["_m"]
        .median()
        .groupby(level=[0, 1, 2], dropna=False)
    )
    spread = (per_wave.max() - per_wave.min()) / per_wave.median()
    noisy = spread > NOISY_TOLERANCE
    keys = pd.MultiIndex.from_frame(frame[["cell", "batch", "prompt_tokens_target"]])
    out = frame.copy()
    out["noisy"] = noisy.reindex(keys).fillna(False).to_numpy(dtype=bool)
    return out
