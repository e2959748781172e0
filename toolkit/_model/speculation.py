"""Speculative decoding in the cost model: the expected tokens of a verification step and its time.

A speculative step drafts ``k`` tokens per decoding sequence, then the target model verifies them in
one pass over ``k + 1`` positions per sequence (the drafts and the token after the last accepted one).
With per-position acceptance probabilities ``a_1 .. a_k`` (position ``i`` accepted given every earlier
one was), a sequence gains ``1 + sum_i prod_{j <= i} a_j`` tokens per step in expectation; for a
constant ``alpha`` that is ``(1 - alpha^(k+1)) / (1 - alpha)`` (Leviathan, Kalman and Matias, "Fast
Inference from Transformers via Speculative Decoding", ICML 2023, arXiv:2211.17192, eq. 1: the
number of tokens a step produces is a capped geometric variable under i.i.d. acceptance).

Its time at ``n`` decoding sequences holding ``K`` KV tokens (plus any prefill riding along) is priced by
the one step formula of :mod:`toolkit._model.terms`:

* verification: one target step of ``n (k + 1)`` tokens that reads the weights once and each sequence's
  KV once (the memory part of ``parts(n (k+1), K, ...)``), computes ``n (k + 1)`` tokens whose queries
  each attend to their sequence's context (the compute and overhead parts of ``parts(n (k+1),
  (k+1) K, ...)``): at a small batch memory-bound, about one decode step; at a large batch compute-bound,
  about ``k + 1`` decode steps, which is why speculation loses at high load (the "verification cost grows
  with batch size" of Liu et al., "Optimizing Speculative Decoding for Serving Large Language Models
  Using Goodput", arXiv:2406.14066);
* drafting: ``k`` sequential decode steps of the drafter at batch ``n`` and the same context (the first
  also prefills the step's prompt tokens, so the drafter holds their KV): a draft model from the catalog
  on the target's GPU, format and tensor parallel with the target's efficiencies; a head (EAGLE, MTP)
  priced as ``draft_layers`` decoder layers of the target's shape plus its output matrix; nothing for
  ``ngram`` (matched on the CPU). Leviathan et al.'s speedup ``E / (k c + 1)``, ``c`` the draft-to-target
  step ratio, is this at a memory-bound batch.

Methods and their drafters: ``data/speculative_methods.csv`` (with sources). A draft model's weights and
KV are not taken out of the target's KV budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from toolkit._args import check_int, check_number
from toolkit._data import load_rows
from toolkit._model.serving import cost_model
from toolkit._model.terms import step_formula

__all__ = ["expected_accepted_tokens"]

# the keys of a speculation dict: vLLM's --speculative-config names, plus the acceptance rate
_KEYS = ("method", "model", "num_speculative_tokens", "acceptance_rate", "draft_layers")
# a CostModel's efficiency fields a draft model takes from its target (mbu: after the TP factor)
_SHARED = (
    "mfu",
    "step_overhead_ms",
    "request_overhead_ms",
    "allreduce_latency_us",
    "serial_share",
    "batched_mbu_factor",
    "seq_overhead_us",
    "attention_score_bytes",
    "dequant_gemm_tokens",
    "masked_pair_share",
    "logit_remainder_reads",
    "logit_batched_reads",
)


@cache
def _methods() -> dict[str, dict[str, Any]]:
    return {row["method"]: row for row in load_rows("speculative_methods.csv")}


@dataclass(frozen=True)
class _Speculation:
    """A checked speculation setting: ``acceptance`` holds one conditional probability per position."""

    method: str
    num_speculative_tokens: int
    acceptance: tuple[float, ...]
    model: Any = None
    draft_layers: int = 0
    draft_vocab_size: float = float("nan")

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a sequence gains per verification step."""
        return float(1 + np.cumprod(self.acceptance).sum())


def speculation_config(value: object) -> _Speculation:
    """Check a ``speculation`` argument (a dict, or one checked already) and return it as a record.

    Raises
    ------
    ValueError
        Naming the key and its allowed values: an unknown method or key, a draft model missing or
        given where the method has none, ``num_speculative_tokens`` not an integer >= 1,
        ``acceptance_rate`` outside [0, 1] or not one number per speculated token.
    """
    if isinstance(value, _Speculation):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"speculation must be a dict with keys {', '.join(_KEYS)}, got {value!r}")
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        raise ValueError(f"speculation has unknown keys {unknown}; known: {', '.join(_KEYS)}")
    methods = _methods()
    method = value.get("method")
    if method not in methods:
        raise ValueError(f"speculation['method'] must be one of {', '.join(methods)}, got {method!r}")
    row = methods[method]
    k = check_int("speculation['num_speculative_tokens']", value.get("num_speculative_tokens"), low=1, high=64)
    rate = value.get("acceptance_rate")
    several = isinstance(rate, list | tuple) or (isinstance(rate, np.ndarray) and rate.ndim > 0)
    rates = list(np.ravel(rate)) if several else [rate] * k
    if len(rates) != k:
        raise ValueError(f"speculation['acceptance_rate'] must be one number or {k} (one per speculated token)")
    acceptance = tuple(check_number("speculation['acceptance_rate']", a, low=0, high=1) for a in rates)
    model = value.get("model")
    if (row["drafter"] == "model") != (model is not None):
        need = "needs a draft 'model'" if row["drafter"] == "model" else "takes no draft 'model'"
        raise ValueError(f"speculation['model']: method {method!r} {need}, got {model!r}")
    layers = value.get("draft_layers", 0 if row["drafter"] != "head" else int(row["draft_layers"]))
    if row["drafter"] == "head":
        layers = check_int("speculation['draft_layers']", layers, low=1, high=1000)
    elif "draft_layers" in value:
        raise ValueError(f"speculation['draft_layers'] applies to a head method, not {method!r}")
    return _Speculation(method, k, acceptance, model, layers, float(row["draft_vocab_size"]))


def expected_accepted_tokens(*, acceptance_rate: object, num_speculative_tokens: int) -> float:
    """Expected tokens one sequence gains per verification step of speculative decoding.

    ``1 + sum_{i=1..k} prod_{j<=i} a_j``: the accepted drafts (a draft counts only when every earlier
    one was accepted) plus the token the verification pass samples after them; for a constant rate
    ``alpha``, ``(1 - alpha^(k+1)) / (1 - alpha)`` (Leviathan et al. 2023, arXiv:2211.17192, eq. 1).

    Parameters
    ----------
    acceptance_rate : float or sequence of float
        Probability a drafted token is accepted, in [0, 1]: one for every position, or one per position
        (each given that the earlier ones were accepted).
    num_speculative_tokens : int
        Tokens drafted per step, ``k`` (1 to 64).

    Returns
    -------
    float
        Between 1 (nothing accepted) and ``k + 1`` (everything accepted).
    """
    spec = {"method": "ngram", "num_speculative_tokens": num_speculative_tokens, "acceptance_rate": acceptance_rate}
    return speculation_config(spec).tokens_per_step


def _head_constants(target: Mapping[str, Any], layers: int, vocab: float) -> dict[str, Any]:
    """The step constants of a draft head: ``layers`` decoder layers shaped like the target's, dense
    (an MoE target's layer priced with all its experts), and an output matrix of ``vocab`` rows (the
    target's where NaN), which the head reads each step as EAGLE and MTP reuse the target's LM head."""
    model = target["model"]
    share = layers / model["layers"]
    out = target["output_weights_bytes"]
    scale = 1.0 if vocab != vocab else vocab / model["vocab_size"]
    body = target["weights_bytes"] - out * (2 - model["tied_embeddings"])
    head = dict(target)
    head["model"] = {**model, "layers": layers, "sliding_window_layers": 0, "experts": 0, "tied_embeddings": True}
    head["weights_bytes"] = head["shared_weights_bytes"] = body * share + out * scale
    head["output_weights_bytes"] = out * scale
    head["expert_bytes"] = 0.0
    head["body_flops_per_token"] = target["body_flops_per_token"] * share
    head["logits_flops_per_token"] = target["logits_flops_per_token"] * scale
    head["dequant_weights_bytes"] = target["dequant_weights_bytes"] * share
    head["dequant_copy_bytes"] = target["dequant_copy_bytes"] * share
    head["kv_bytes_per_token"] = target["kv_layer_bytes"] * layers
    return head


def draft_constants(cost: Any, spec: _Speculation) -> dict[str, Any] | None:
    """The step constants of ``spec``'s drafter beside the :class:`CostModel` ``cost`` (None: no GPU work)."""
    drafter = _methods()[spec.method]["drafter"]
    if drafter == "none":
        return None
    if drafter == "head":
        return _head_constants(vars(cost), spec.draft_layers, spec.draft_vocab_size)
    shared = {name: getattr(cost, name) for name in _SHARED}
    draft = cost_model(
        spec.model,
        cost.gpu,
        cost.quant,
        tensor_parallel=cost.tensor_parallel,
        kv_dtype=cost.kv_dtype,
        backend=cost.backend,
        mbu=cost.mbu,
        tp_mbu_factor=1.0,
        **shared,
    )
    if draft.model["vocab_size"] != cost.model["vocab_size"]:
        # the verifier compares the two models' distributions token by token (vLLM checks the sizes match)
        vocab = f"{draft.model['vocab_size']} tokens against {cost.model['vocab_size']}"
        raise ValueError(f"speculation['model'] must share the target's vocabulary; {draft.model['name']} has {vocab}")
    return vars(draft)


def speculative_step_formula(
    target: Mapping[str, Any], draft: Mapping[str, Any] | None, k: int
) -> tuple[Callable, Callable, Callable]:
    """``(step, verify, drafting)``: functions of ``(n, kv, p, c, e=1)`` giving in ms a speculative step
    of ``n`` decoding sequences holding ``kv`` tokens with ``p`` prefilled tokens attending to ``c``
    (``e`` prompts ending), its target verification pass, and its drafter's ``k`` steps (see the module
    docstring); numbers or numpy arrays."""
    parts, combine, _ = step_formula(target)
    draft_step = None if draft is None else step_formula(draft)[2]

    def verify(n: Any, kv: Any, p: Any, c: Any, e: Any = 1) -> Any:
        rows = n * (k + 1)
        memory_ms = parts(rows, kv, p, c, e)[0]
        _, compute_ms, overhead_ms = parts(rows, kv * (k + 1), p, c, e)
        return combine(memory_ms, compute_ms, overhead_ms)

    def drafting(n: Any, kv: Any, p: Any, c: Any, e: Any = 1) -> Any:
        if draft_step is None:
            return 0 * n
        return draft_step(n, kv, p, c, e) + (k - 1) * (n > 0) * draft_step(n, kv, 0, 0)

    def step(n: Any, kv: Any, p: Any, c: Any, e: Any = 1) -> Any:
        return verify(n, kv, p, c, e) + drafting(n, kv, p, c, e)

    return step, verify, drafting
