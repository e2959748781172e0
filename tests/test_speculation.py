"""Speculative decoding: the expected tokens per step, the speculative step's cost, simulate and plan."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import toolkit

TARGET = toolkit.cost_model("Llama-3.1-8B", "H100 SXM", "fp16")
DRAFT = {"method": "draft_model", "model": "Llama-3.2-1B", "num_speculative_tokens": 4, "acceptance_rate": 0.7}
BATCHES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512])


def _spec(method: str, k: int, alpha: object, **extra: object) -> dict:
    return {"method": method, "num_speculative_tokens": k, "acceptance_rate": alpha, **extra}


def test_expected_tokens_match_a_monte_carlo_of_the_acceptance_chain():
    rng = np.random.default_rng(7)
    for alpha, k in ((0.6, 3), (0.9, 5), ((0.9, 0.5, 0.2), 3)):
        rates = np.broadcast_to(np.asarray(alpha, dtype=float), (k,))
        accepted = rng.random((200_000, k)) < rates  # each draft accepted with its position's probability
        gained = 1 + np.cumprod(accepted, axis=1).sum(axis=1)  # drafts up to the first rejection, plus one
        se = gained.std() / np.sqrt(gained.size)
        got = toolkit.expected_accepted_tokens(acceptance_rate=alpha, num_speculative_tokens=k)
        assert abs(got - gained.mean()) < 4 * se
    # the closed form of Leviathan et al. (2023) for a constant rate
    assert toolkit.expected_accepted_tokens(acceptance_rate=0.8, num_speculative_tokens=4) == pytest.approx(
        (1 - 0.8**5) / (1 - 0.8)
    )
    assert toolkit.expected_accepted_tokens(acceptance_rate=0.0, num_speculative_tokens=4) == 1
    assert toolkit.expected_accepted_tokens(acceptance_rate=1.0, num_speculative_tokens=4) == 5


@pytest.mark.parametrize(
    "spec",
    [_spec("ngram", 4, 0.0), _spec("eagle", 3, 0.0), _spec("draft_model", 5, 0.0, model="Llama-3.2-1B")],
    ids=["ngram", "eagle", "draft_model"],
)
def test_acceptance_zero_never_beats_plain_decoding(spec):
    for context in (100, 4000):
        table = toolkit.speculative_decoding(TARGET, speculation=spec, batch_sizes=BATCHES, context_tokens=context)
        plain = np.asarray(TARGET.step_ms(BATCHES, BATCHES * context))
        np.testing.assert_allclose(table["plain_tpot_ms"], plain)
        assert (table["speculative_tpot_ms"] >= plain).all()
        assert (table["speedup"] <= 1).all()


def test_free_draft_full_acceptance_verifies_k_plus_one_tokens_for_about_one_step_at_batch_one():
    table = toolkit.speculative_decoding(TARGET, speculation=_spec("ngram", 3, 1.0), batch_sizes=1, context_tokens=500)
    row = table.iloc[0]
    assert row["tokens_per_step"] == 4 and row["draft_ms"] == 0
    # memory-bound: 4 tokens read the 16 GB of weights once, so verification costs about one decode step
    assert row["plain_step_ms"] <= row["verify_ms"] < 1.05 * row["plain_step_ms"]
    assert row["speedup"] == pytest.approx(4 * row["plain_step_ms"] / row["verify_ms"])


def test_memory_bound_speedup_is_leviathans_formula_with_the_draft_step_ratio():
    context = 1000
    draft = toolkit.cost_model("Llama-3.2-1B", "H100 SXM", "fp16")
    c = draft.step_ms(1, context) / TARGET.step_ms(1, context)  # cost coefficient of Leviathan et al. section 3.3
    k, alpha = 4, 0.7
    expected = (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))
    got = toolkit.speculative_decoding(TARGET, speculation=DRAFT, batch_sizes=1, context_tokens=context)["speedup"][0]
    assert got == pytest.approx(expected, rel=0.05)  # the verification pass of 5 tokens: a few % over one step


def test_a_draft_model_stops_paying_at_a_crossover_batch():
    crossover = toolkit.speculation_crossover_batch(TARGET, speculation=DRAFT, context_tokens=1000)
    assert crossover is not None and crossover > 1
    table = toolkit.speculative_decoding(
        TARGET, speculation=DRAFT, batch_sizes=[1, crossover - 1, crossover], context_tokens=1000
    )
    assert table["speedup"][0] > 1.2 and table["speedup"][1] >= 1 > table["speedup"][2]
    # where it loses, verifying 5 tokens per sequence has become compute-bound: well over one decode step
    assert table["verify_ms"][2] > 1.5 * table["plain_step_ms"][2]
    # an ideal speculator (free drafts, all accepted) still pays there: the draft model's cost tips it
    free = toolkit.speculative_decoding(
        TARGET, speculation=_spec("ngram", 4, 1.0), batch_sizes=crossover, context_tokens=1000
    )
    assert free["speedup"][0] > 1


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (_spec("ngram", 0, 0.5), "num_speculative_tokens"),
        (_spec("ngram", 2.5, 0.5), "num_speculative_tokens"),
        (_spec("ngram", 3, -0.1), "acceptance_rate"),
        (_spec("ngram", 3, 1.5), "acceptance_rate"),
        (_spec("ngram", 3, (0.5, 0.5)), "acceptance_rate"),
        (_spec("medusa-9", 3, 0.5), "method"),
        (_spec("draft_model", 3, 0.5), "model"),
        (_spec("draft_model", 3, 0.5, model="no-such-model"), "model"),
        (_spec("draft_model", 3, 0.5, model="Llama-2-7B"), "vocabulary"),
        (_spec("ngram", 3, 0.5, model="Llama-3.2-1B"), "model"),
        (_spec("eagle", 3, 0.5, draft_layers=0), "draft_layers"),
        ({**_spec("ngram", 3, 0.5), "num_spec_tokens": 3}, "num_spec_tokens"),
        ("ngram", "speculation"),
    ],
)
def test_bad_speculation_is_a_value_error_naming_the_field(spec, field):
    with pytest.raises(ValueError, match=field):
        toolkit.speculative_decoding(TARGET, speculation=spec, batch_sizes=1, context_tokens=100)


def _decode_s(result) -> np.ndarray:
    requests = result.requests
    return (requests["e2e_s"] - requests["ttft_s"]).to_numpy()


def test_simulated_full_acceptance_with_a_free_draft_yields_k_plus_one_tokens_per_step():
    k, steps = 3, 10
    output = 1 + steps * (k + 1)  # the first token comes from the prefill
    spec = _spec("ngram", k, 1.0)
    one = dict(prompt_tokens=200, output_tokens=output, num_requests=1, arrival_rate=1.0, warmup_fraction=0)
    run = toolkit.simulate("Llama-3.1-8B", "H100 SXM", "fp16", speculation=spec, **one)
    step_ms = toolkit.speculative_decoding(TARGET, speculation=spec, batch_sizes=1, context_tokens=200)["verify_ms"][0]
    taken = _decode_s(run)[0] * 1e3 / step_ms  # verification steps (the context grows by a few tokens)
    assert taken == pytest.approx(steps, rel=0.01)
    assert (output - 1) / round(taken) == k + 1
    # one token short of a full last step: still `steps` steps, never past the output length
    short = toolkit.simulate(
        "Llama-3.1-8B", "H100 SXM", "fp16", speculation=spec, **{**one, "output_tokens": output - 1}
    )
    assert _decode_s(short)[0] == pytest.approx(_decode_s(run)[0], rel=0.01)
    assert short.requests["output_tokens"][0] == output - 1


def test_simulated_tokens_per_step_follow_the_acceptance_rate():
    k, alpha = 3, 0.6
    spec = _spec("ngram", k, alpha)
    # one request at a time (arrivals 50 s apart), so every step is at batch 1
    run = toolkit.simulate(
        "Llama-3.1-8B",
        "H100 SXM",
        "fp16",
        prompt_tokens=100,
        output_tokens=401,
        num_requests=60,
        arrival_rate=0.02,
        speculation=spec,
        warmup_fraction=0,
        seed=3,
    )
    step_ms = toolkit.speculative_decoding(TARGET, speculation=spec, batch_sizes=1, context_tokens=300)["verify_ms"][0]
    per_step = 400 / (_decode_s(run) * 1e3 / step_ms)  # tokens per verification step of each request
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert per_step.mean() == pytest.approx(expected, rel=0.03)
    assert per_step.std() > 0  # drawn, not the mean applied


def test_simulated_acceptance_zero_is_never_faster_and_no_speculation_is_unchanged():
    load = dict(prompt_tokens=300, output_tokens=("geometric", 100), num_requests=300, arrival_rate=20.0, seed=1)
    plain = toolkit.simulate("Llama-3.1-8B", "H100 SXM", "fp16", **load)
    same = toolkit.simulate("Llama-3.1-8B", "H100 SXM", "fp16", speculation=None, **load)
    assert plain.requests.equals(same.requests)
    zero = toolkit.simulate("Llama-3.1-8B", "H100 SXM", "fp16", speculation=_spec("ngram", 4, 0.0), **load)
    assert (zero.requests["output_tokens"] == plain.requests["output_tokens"]).all()
    for metric in ("tpot_mean_s", "tpot_p95_s", "e2e_mean_s"):
        assert zero.summary[metric][0] > plain.summary[metric][0]


def test_simulation_with_preemption_finishes_every_request():
    # a small KV cache (L4, 24 GB, holding 16 GB of weights) under long requests preempts
    load = dict(prompt_tokens=2000, output_tokens=("geometric", 400), num_requests=60, arrival_rate=50.0, seed=2)
    run = toolkit.simulate("Llama-3.1-8B", "L4", "fp16", speculation=DRAFT, **load)
    assert run.summary["preemptions"][0] > 0
    assert run.requests["e2e_s"].notna().all() and len(run.requests) == 60
    assert (run.requests["tpot_s"].dropna() > 0).all()


def test_plan_flags_where_speculation_loses():
    args = dict(models="Llama-3.1-8B", gpus="H100 SXM", quants="fp16", backends="vllm", tensor_parallel=(1,))
    light = toolkit.plan(0.5, 500, 200, speculation=DRAFT, **args)
    assert light["speculation_pays"].all() and (light["speculation_speedup"] > 1).all()
    zero = toolkit.plan(0.5, 500, 200, speculation={**DRAFT, "acceptance_rate": 0.0}, **args)
    assert not zero["speculation_pays"].any()
    # each row's speedup is speculative_decoding's at that row's operating batch
    row = light.iloc[0]
    at = toolkit.speculative_decoding(
        toolkit.cost_model("Llama-3.1-8B", "H100 SXM", "fp16", backend="vllm"),
        speculation=DRAFT,
        batch_sizes=max(1, round(row["utilization"] * row["batch"])),
        context_tokens=600,
    )
    assert row["speculation_speedup"] == pytest.approx(at["speedup"][0])
    with pytest.raises(ValueError, match="acceptance_rate"):
        toolkit.plan(0.5, 500, 200, speculation={**DRAFT, "acceptance_rate": 2}, **args)


def test_published_speedups_are_reproduced_within_a_quarter():
    # the benchmark's own predictions, against the figures its sources published (speculative_published.csv)
    path = Path(__file__).parent / "benchmarks" / "bench_speculation.py"
    spec = importlib.util.spec_from_file_location("bench_speculation", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = toolkit.speculative_methods()  # every method a published row names is one the toolkit knows
    published = bench.load_rows("speculative_published.csv")
    assert len(published) >= 2 and {row["method"] for row in published} <= set(rows["method"])
    for row in published:
        assert abs(bench.predict(row) / row["published"] - 1) <= 0.25, row["id"]
