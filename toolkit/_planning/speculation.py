"""``plan(speculation=...)``: whether speculative decoding pays on each candidate at its operating batch.

A candidate's operating batch is the mean number of sequences it decodes at the planned load, ``utilization x
batch`` (at least 1), each holding ``prompt_tokens + output_tokens / 2`` tokens (the context of the planner's
mean decode step). There the speedup is plain over speculative time per output token, from
:func:`toolkit.speculative_decoding`'s formulas (:mod:`toolkit._model.speculation`): below 1, speculation
loses to plain decoding on that candidate. The fleets themselves are sized for plain decoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit._model.serving import cost_model
from toolkit._model.speculation import _Speculation, speculation_config

if TYPE_CHECKING:
    import pandas as pd

__all__: list[str] = []


def check_speculation(speculation: object) -> _Speculation | None:
    """``plan``'s ``speculation`` checked (None: none), before the search, so a bad setting fails at once."""
    return None if speculation is None else speculation_config(speculation)


def speculation_columns(
    table: pd.DataFrame, spec: _Speculation | None, prompt_tokens: int, output_tokens: int, calibration: object
) -> pd.DataFrame:
    """``table`` with ``speculation_batch`` (the operating batch), ``speculation_speedup`` and
    ``speculation_pays`` (speedup >= 1) per row; unchanged when ``spec`` is None. A candidate whose drafter
    cannot run beside it (a draft model of another vocabulary, or whose heads its tensor parallel does not divide)
    gets NaN and False."""
    if spec is None:
        return table
    from toolkit._model.speculative_table import _steps  # pandas: plan's table is built already

    context = prompt_tokens + output_tokens / 2
    batch = np.maximum(np.rint(table["utilization"].to_numpy(float) * table["batch"].to_numpy(float)), 1)
    keys = zip(table["model"], table["gpu"], table["quant"], table["backend"], table["tensor_parallel"])
    models: dict[tuple, Any] = {}
    speedup = np.full(len(table), np.nan)
    for i, key in enumerate(keys):
        if key not in models:
            model, gpu, quant, backend, tp = key
            models[key] = cost_model(
                model, gpu, quant, tensor_parallel=int(tp), backend=backend, calibration=calibration
            )
        try:
            speedup[i] = _steps(models[key], spec, batch[i : i + 1], context)["speedup"][0]
        except ValueError:  # the drafter does not fit this candidate
            continue
    return table.assign(speculation_batch=batch.astype(int), speculation_speedup=speedup, speculation_pays=speedup >= 1)
