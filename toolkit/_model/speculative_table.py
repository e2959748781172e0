"""Speculative against plain decoding per batch size, and the batch where speculation stops paying.

The step times are :mod:`toolkit._model.speculation`'s (the formulas and their sources are in its module
docstring); these functions tabulate them for a :class:`CostModel`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from toolkit._args import check_array, check_int, check_number
from toolkit._data import load_csv
from toolkit._model.cost import CostModel
from toolkit._model.efficiency import MAX_BATCH
from toolkit._model.speculation import draft_constants, speculation_config, speculative_step_formula
from toolkit._model.terms import step_formula

__all__ = ["speculation_crossover_batch", "speculative_decoding", "speculative_methods"]

# the largest batch the crossover search looks at when the cost model sets no cap of its own
CROSSOVER_MAX_BATCH = 4096


def speculative_methods() -> pd.DataFrame:
    """Return the speculative-decoding methods ``speculation['method']`` may name.

    Parameters
    ----------
    None

    Returns
    -------
    pandas.DataFrame
        One row per method (vLLM's ``--speculative-config`` names): ``method``, ``drafter`` (``model``: a
        draft model from the catalog; ``head``: ``draft_layers`` decoder layers of the target's shape with
        an output matrix of ``draft_vocab_size`` rows, NaN for the target's vocabulary; ``none``: drafts
        matched on the CPU), ``draft_layers``, ``draft_vocab_size``, ``source``.
    """
    return load_csv("speculative_methods.csv")


def _steps(cost: object, speculation: object, batch: np.ndarray, context: float) -> dict[str, np.ndarray]:
    if not isinstance(cost, CostModel):
        raise ValueError(f"cost must be a CostModel (toolkit.cost_model), got {type(cost).__name__}")
    spec = speculation_config(speculation)
    constants = vars(cost)
    cost.check_window("context_tokens", context)
    step, verify, drafting = speculative_step_formula(
        constants, draft_constants(cost, spec), spec.num_speculative_tokens
    )
    kv = batch * context
    plain = np.asarray(step_formula(constants)[2](batch, kv, 0, 0), dtype=float)
    verify_ms = np.asarray(verify(batch, kv, 0, 0), dtype=float)
    draft_ms = np.broadcast_to(np.asarray(drafting(batch, kv, 0, 0), dtype=float), batch.shape)
    tokens = spec.tokens_per_step
    speculative = verify_ms + draft_ms
    return {
        "batch_size": batch.astype(int),
        "context_tokens": np.full(batch.shape, context),
        "tokens_per_step": np.full(batch.shape, tokens),
        "plain_step_ms": plain,
        "draft_ms": draft_ms,
        "verify_ms": verify_ms,
        "speculative_step_ms": speculative,
        "plain_tpot_ms": plain,
        "speculative_tpot_ms": speculative / tokens,
        "speedup": plain * tokens / speculative,
    }


def speculative_decoding(
    cost: CostModel, *, speculation: object, batch_sizes: object, context_tokens: float
) -> pd.DataFrame:
    """Time per output token with and without speculative decoding, per batch size.

    Each sequence of a batch of ``b`` holds ``context_tokens`` tokens. Plain decoding takes one step,
    ``cost.step_ms(b, b x context_tokens)``, per token; speculative decoding takes one speculative step
    (the drafter's ``k`` steps and the target's verification of ``b (k + 1)`` tokens: the formulas of
    :mod:`toolkit._model.speculation`) per ``tokens_per_step`` expected tokens.

    Parameters
    ----------
    cost : CostModel
        The target model on its GPU (:func:`toolkit.cost_model`).
    speculation : dict
        vLLM's ``--speculative-config`` keys: ``method`` (``draft_model``, ``ngram``, ``eagle``,
        ``eagle3``, ``mtp``; ``data/speculative_methods.csv``), ``model`` (the draft model's catalog name
        or spec, for ``draft_model`` only), ``num_speculative_tokens`` (k, 1 to 64), plus
        ``acceptance_rate`` (in [0, 1]; one number, or one per speculated token, each given the earlier
        ones were accepted) and, for a head, ``draft_layers`` (decoder layers, default the method's).
    batch_sizes : int or array-like
        Decoding sequences per step (>= 1).
    context_tokens : float
        Tokens each sequence holds (>= 1, within the model's context window).

    Returns
    -------
    pandas.DataFrame
        One row per batch size: ``batch_size``, ``context_tokens``, ``tokens_per_step`` (expected tokens
        per verification step), ``plain_step_ms``, ``draft_ms``, ``verify_ms``, ``speculative_step_ms``,
        ``plain_tpot_ms``, ``speculative_tpot_ms`` (ms) and ``speedup`` (plain over speculative TPOT:
        below 1 where speculation loses to plain decoding).
    """
    batch = check_array("batch_sizes", batch_sizes, low=1, high=MAX_BATCH)
    context = check_number("context_tokens", context_tokens, low=1)
    return pd.DataFrame(_steps(cost, speculation, batch, context))


def speculation_crossover_batch(
    cost: CostModel, *, speculation: object, context_tokens: float, max_batch: int | None = None
) -> int | None:
    """The smallest batch size at which speculative decoding is slower per token than plain decoding.

    Parameters
    ----------
    cost : CostModel
        The target model on its GPU.
    speculation : dict
        As for :func:`speculative_decoding`.
    context_tokens : float
        Tokens each sequence holds (>= 1).
    max_batch : int, optional
        Largest batch searched (>= 1); default the sequences of ``context_tokens`` the KV budget holds,
        capped by the backend's ``max_batch`` and by 4096.

    Returns
    -------
    int or None
        The first batch in ``1 .. max_batch`` with ``speedup < 1``; None where speculation pays at
        every batch up to ``max_batch``.
    """
    context = check_number("context_tokens", context_tokens, low=1)
    if max_batch is None:
        fits = int(cost.max_concurrent_seqs(math.ceil(context))) if isinstance(cost, CostModel) else 1
        top = max(1, min(fits, CROSSOVER_MAX_BATCH, int(min(cost.max_batch, CROSSOVER_MAX_BATCH))))
    else:
        top = check_int("max_batch", max_batch, low=1, high=MAX_BATCH)
    speedup = _steps(cost, speculation, np.arange(1, top + 1, dtype=float), context)["speedup"]
    losing = np.flatnonzero(speedup < 1)
    return int(losing[0]) + 1 if losing.size else None
