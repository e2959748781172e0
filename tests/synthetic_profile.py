"""A synthetic profile that follows the calibration's observation model of a known cost model.

Three passes over ``cells`` ((cell, batch, prompt tokens, output tokens) each); every request's TTFT is
``CostModel.ttft_ms(prompt)`` and its TPOT the decode step at its batch and mean context, times a factor
per wave (``wave_sd``, none when 0) and per request (0.5%). ``slow`` multiplies the TTFT of every repeat
of one (cell, prompt) by a factor: a cell off the model whose repeats still agree.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def synthetic_profile(
    cm, cells, *, seed: int, wave_sd: float = 0.02, slow: tuple[str, int, float] | None = None
) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows, wave = [], 0
    for repeat in range(3):
        for cell, batch, prompt, output in cells:
            factor = 1 + wave_sd * rng.standard_normal() if wave_sd else 1.0
            step = float(cm.step_ms(batch, batch * (prompt + output / 2)))
            ttft = float(cm.ttft_ms(prompt))
            if slow is not None and (cell, prompt) == slow[:2]:
                ttft *= slow[2]
            for request in range(batch):
                jitter = 1 + 0.005 * rng.standard_normal(2)
                rows.append(
                    {
                        "cell": cell,
                        "repeat": repeat,
                        "wave": wave,
                        "batch": batch,
                        "request": request,
                        "prompt_tokens_target": prompt,
                        "prompt_tokens": prompt,
                        "cached_tokens": 0,
                        "output_tokens": output,
                        "ttft_ms": ttft * factor * jitter[0],
                        "tpot_ms": step * factor * jitter[1],
                        "outcome": "ok",
                        "noisy": False,
                    }
                )
            wave += 1
    return pd.DataFrame(rows)
