"""llama-server's iteration: up to ``--batch-size`` tokens, run as graph passes of ``--ubatch-size``.

One server iteration (``update_slots``, tools/server/server-context.cpp) fills a batch of up to n_batch
(2048) tokens, the running slots' decode tokens first, and hands it to one ``llama_decode``, which
computes it in passes of n_ubatch (512) tokens, each reading the weights; every token of the batch is
sampled after the last pass. The simulator prices such a step pass by pass (``ubatch_tokens``,
:func:`toolkit._queueing.chunking.iteration_ms`). The times below are derived by hand from a toy cost
of 1 ms per pass, 0.01 ms per token and 0.5 ms per prompt whose logits the pass computes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import toolkit as tk
from toolkit._calibration.fit import predict_ms
from toolkit._queueing.chunking import iteration_ms
from toolkit._sweep.llama_server import SCHEDULING


class _Toy:
    kv_budget_tokens = 10**6
    request_overhead_ms = 0.0
    kv_block_tokens = 1

    def step_ms(self, n, kv, p, c, last_chunks=1):
        # prompts ended are counted up to the prompt tokens, as CostModel.step_ms counts them
        return 1.0 + 0.01 * (n + p) + 0.5 * np.minimum(last_chunks, p) + 0 * np.asarray(kv, dtype=float)


def _run(trace: pd.DataFrame, **scheduling) -> pd.DataFrame:
    return tk.simulate(trace=trace, cost=_Toy(), max_batch=8, warmup_fraction=0.0, **scheduling).requests


def _trace(prompts, outputs, arrivals) -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": arrivals, "prompt_tokens": prompts, "output_tokens": outputs})


def test_a_1500_token_prompt_alone_is_one_iteration_of_three_passes():
    # 512 + 512 + 476 tokens: 3 passes x 1 ms + 1500 x 0.01 ms + 0.5 ms of logits in the last
    row = _run(_trace([1500], [3], [0.0]), max_num_batched_tokens=2048, ubatch_tokens=512).iloc[0]
    assert row["ttft_s"] * 1e3 == pytest.approx(18.5)
    # priced as one pass it would take 1 + 15 + 0.5 ms
    one = _run(_trace([1500], [3], [0.0]), max_num_batched_tokens=2048).iloc[0]
    assert one["ttft_s"] * 1e3 == pytest.approx(16.5)


def test_running_decodes_get_one_token_at_the_end_of_the_whole_iteration():
    # A (1-token prompt, 11 tokens out) has its first token at 1 + 0.01 + 0.5 = 1.51 ms. B (1500 tokens,
    # 1 out) arrives at 1.5 ms and joins the next iteration with A's decode token: passes of 1 + 511,
    # 512 and 477 tokens, 3 + 15.01 + 0.5 = 18.51 ms, after which both get a token (20.02 ms). A then
    # decodes its last 9 tokens alone, 1.01 ms each.
    trace = _trace([1, 1500], [11, 1], [0.0, 0.0015])
    a, b = _run(trace, max_num_batched_tokens=2048, ubatch_tokens=512).itertuples()
    assert b.ttft_s * 1e3 == pytest.approx(20.02 - 1.5)
    assert a.e2e_s * 1e3 == pytest.approx(20.02 + 9 * 1.01)
    # stepping every 512 tokens instead, A gets a token after each of B's three chunks (511, 511, 478
    # tokens beside it: 6.12, 6.12 and 6.29 ms), so it finishes 2 decode steps sooner
    a_old, b_old = _run(trace, max_num_batched_tokens=512).itertuples()
    assert b_old.ttft_s * 1e3 == pytest.approx(1.51 + 18.53 - 1.5)
    assert a_old.e2e_s * 1e3 == pytest.approx(1.51 + 18.53 + 7 * 1.01)


def test_the_llama_server_breaks_still_cap_one_prompts_share_of_an_iteration():
    # SCHEDULING: the first token alone (the start of the user message), then all but the last 516
    # (983 tokens: passes of 512 and 471), then 512, then the last 4 with the first output token:
    # 1.01 + (2 + 9.83) + (1 + 5.12) + (1 + 0.04 + 0.5) ms
    row = _run(_trace([1500], [3], [0.0]), **SCHEDULING).iloc[0]
    assert row["ttft_s"] * 1e3 == pytest.approx(20.5)


def test_iteration_ms_prices_each_pass_with_the_cost_models_step():
    cm = tk.cost_model("Gemma-3-270M", "H100-SXM", "q4_k_m")
    # 8 decodes (holding 4,000 KV tokens) and 1,500 prompt tokens ending one prompt: passes of 8 + 504,
    # 512 and 484 prompt tokens, the later ones attending to the earlier
    passes = cm.step_ms(8, 4000, 504, 0, 0) + cm.step_ms(0, 0, 512, 504, 0) + cm.step_ms(0, 0, 484, 1016, 1)
    assert iteration_ms(cm.step_ms, 8, 4000, 1500, 0, 1, 512) == pytest.approx(passes)
    assert iteration_ms(cm.step_ms, 8, 4000, 400, 0, 1, 512) == pytest.approx(cm.step_ms(8, 4000, 400, 0, 1))


def test_the_calibration_prices_a_wave_of_prompts_in_passes():
    # four 383-token prompts sent together, nothing decoding: one step of 1,532 prompt tokens, run as
    # passes of 512, 512, 508 (each prompt's 4 last tokens are in the last)
    obs = pd.DataFrame(
        {
            "kind": ["ttft"], "batch": [4], "context_tokens": [383.0], "cached_tokens": [0.0], "prompt_tokens": [383.0],
            "wave_tokens": [1532.0], "wave_prompts": [4.0], "decoding": [0.0],
        }
    )  # fmt: skip
    cm = tk.cost_model("Gemma-3-270M", "H100-SXM", "q4_k_m")
    passes = cm.step_ms(0, 0, 512, 0, 0) + cm.step_ms(0, 0, 512, 512, 0) + cm.step_ms(0, 0, 508, 1024, 4)
    assert predict_ms(cm, obs, ubatch_tokens=512)[0] == pytest.approx(passes + cm.request_overhead_ms)
    assert predict_ms(cm, obs)[0] == pytest.approx(cm.step_ms(0, 0, 1532, 0, 4) + cm.request_overhead_ms)


@pytest.mark.parametrize("value", [0, 4096, 1.5])
def test_bad_ubatch_names_the_argument(value):
    with pytest.raises(ValueError, match="ubatch_tokens"):
        _run(_trace([10], [2], [0.0]), max_num_batched_tokens=2048, ubatch_tokens=value)
