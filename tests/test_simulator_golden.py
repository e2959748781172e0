"""simulate() reproduces, for fixed seeds, the request records of the event loop as it was before it
was rewritten for speed (issue 13).

The golden figures were recorded with the simulator of commit d750359 (per-request Python lists, one
heap entry per decode completion): a few summary numbers, and a sha256 of every request's record
(times rounded to the microsecond, token counts, replica, preemptions). Any change to the schedule,
to a step's duration or to the bookkeeping of a single request changes the digest.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pandas as pd
import pytest

from toolkit import cost_model, simulate

CHAT = dict(model="Llama-3.1-8B", gpu="H100 SXM", quant="fp16")
LONG_PROMPTS = dict(prompt_tokens=("lognormal", 512, 1.0), output_tokens=("geometric", 256))


def _trace() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arrival_s": np.sort(np.random.default_rng(3).uniform(0, 600, 3000)),
            "prompt_tokens": np.random.default_rng(4).integers(10, 3000, 3000),
            "output_tokens": np.random.default_rng(5).integers(1, 800, 3000),
        }
    )


WORKLOADS = {
    "poisson": dict(**CHAT, **LONG_PROMPTS, num_requests=20000, arrival_rate=20.0, seed=1),
    "closed": dict(
        **CHAT, prompt_tokens=512, output_tokens=("geometric", 256), num_requests=5000, concurrency=64, seed=2
    ),
    "rr4": dict(**CHAT, **LONG_PROMPTS, num_requests=10000, arrival_rate=80.0, replicas=4, seed=3),
    "ll4": dict(
        **CHAT, **LONG_PROMPTS, num_requests=10000, arrival_rate=80.0, replicas=4, routing="least_loaded", seed=4
    ),
    "shared3": dict(
        model="Llama-3.1-8B",
        gpu="L4",
        quant="fp16",
        prompt_tokens=("lognormal", 700, 0.8),
        output_tokens=("geometric", 200),
        num_requests=5000,
        arrival_rate=1.5,
        replicas=3,
        routing="shared_queue",
        seed=5,
        max_batch=16,
    ),
    "kv_pressure": dict(
        model="Llama-3.1-8B",
        gpu="L4",
        quant="fp16",
        prompt_tokens=1024,
        output_tokens=("geometric", 512),
        num_requests=3000,
        arrival_rate=0.4,
        seed=6,
    ),
    "trace": dict(
        model="Qwen2.5-14B",
        gpu="A100 80GB",
        quant="fp16",
        prompt_tokens=None,
        output_tokens=None,
        num_requests=None,
        replicas=2,
        routing="least_loaded",
    ),
    "gamma_tp": dict(
        model="Llama-3.1-70B",
        gpu="H100 SXM",
        quant="fp8",
        tensor_parallel=4,
        prompt_tokens=("lognormal", 1500, 1.2),
        output_tokens=("lognormal", 300, 0.7),
        num_requests=8000,
        arrival_rate=12.0,
        arrivals="gamma",
        ca2=3.0,
        seed=7,
        max_num_batched_tokens=4096,
        calibration={"tp_mbu_factor": 0.9},  # recorded before issue 17's NVLink factor of 0.8
    ),
    "moe_tp2": dict(
        model="Mixtral-8x7B",
        gpu="H100 SXM",
        quant="fp8",
        tensor_parallel=2,
        prompt_tokens=("lognormal", 800, 1.0),
        output_tokens=("geometric", 150),
        num_requests=6000,
        arrival_rate=15.0,
        seed=8,
        calibration={"tp_mbu_factor": 0.9},  # recorded before issue 17's NVLink factor of 0.8
    ),
    "window": dict(
        model="Gemma-3-270M",
        gpu="L4",
        quant="bf16",
        prompt_tokens=("lognormal", 1500, 1.5),
        output_tokens=("geometric", 300),
        num_requests=6000,
        arrival_rate=60.0,
        seed=9,
        max_num_batched_tokens=1024,
    ),
    "shared_pressure": dict(
        model="Mistral-7B",
        gpu="A10G",
        quant="int8",
        prompt_tokens=("lognormal", 2000, 0.5),
        output_tokens=("geometric", 400),
        num_requests=3000,
        arrival_rate=2.0,
        replicas=2,
        routing="shared_queue",
        seed=10,
    ),
}

# digest, e2e p95 (s), ttft p95 (s), utilization, throughput (req/s), preemptions, sum of e2e (s)
GOLDEN = {
    "poisson": (
        "9a9e75c3666309de",
        9.199824013824784,
        0.10269982275128624,
        1.0,
        19.763700723519552,
        0,
        62919.43833419895,
    ),
    "closed": (
        "a0ac00ab778cac33",
        9.153854752670053,
        0.05875943103201742,
        1.0,
        19.762676743174847,
        0,
        15323.82508287239,
    ),
    "rr4": (
        "3cf45965f36e7340",
        9.35426237668222,
        0.06979939571081627,
        0.9669302678851605,
        72.13191735494111,
        0,
        31118.73719317229,
    ),
    "ll4": (
        "845478706f99084e",
        9.108649820186761,
        0.0798817655364906,
        0.9738587838462378,
        71.89442829226135,
        0,
        30680.47916509596,
    ),
    "shared3": (
        "341da09ec049e821",
        53.01433000918129,
        0.4991140161691363,
        0.9923545491185695,
        1.4977767815115237,
        0,
        86440.19683743845,
    ),
    "kv_pressure": (
        "4599cf250836a31d",
        161.9632424629642,
        14.243709868654298,
        1.0,
        0.40070308074253635,
        249,
        164777.95974648022,
    ),
    "trace": (
        "3ef9ac21baa18a79",
        131.64893522667722,
        48.04591654932287,
        0.9972952218412711,
        4.323088311097502,
        422,
        227123.53698088726,
    ),
    "gamma_tp": (
        "9d434dafaa9ffe0f",
        87.86839168590454,
        53.91556407492822,
        1.0,
        10.614155887736382,
        0,
        394597.4961070089,
    ),
    "moe_tp2": (
        "0eb2f5a8826aef7f",
        6.163982784502398,
        0.06661292753760796,
        1.0,
        14.63602439944412,
        0,
        12534.880781112231,
    ),
    "window": (
        "b32918b4d2c1d8ef",
        50.923591417283596,
        46.099515488436246,
        1.0,
        36.718673941396254,
        0,
        160703.6407613065,
    ),
    "shared_pressure": (
        "8c51ac7446afb459",
        610.2324810384679,
        529.76073173985,
        0.9981988327567121,
        1.352365357783279,
        554,
        1014637.7003269044,
    ),
}


class _Recorded:
    """The cost model as the runs were recorded: before a step's logits and output matrix were
    charged to the steps that compute logits (every step read the output matrix, and only decoded
    tokens computed logits). With no output matrix to skip and no prompt ending, the step formula is
    that one."""

    def __init__(self, cm):
        self._cm = dataclasses.replace(cm, output_weights_bytes=0.0)

    def __getattr__(self, name):
        return getattr(self._cm, name)

    def step_ms(self, decode_seqs, kv_tokens, prefill_tokens=0, prefill_context_tokens=0):
        return self._cm.step_ms(decode_seqs, kv_tokens, prefill_tokens, prefill_context_tokens, 0)


def _digest(requests: pd.DataFrame) -> str:
    h = hashlib.sha256()
    for col in ("arrival_s", "queue_wait_s", "ttft_s", "tpot_s", "e2e_s"):
        h.update(np.ascontiguousarray(np.round(requests[col].to_numpy(dtype=float), 6) + 0.0).tobytes())
    for col in ("prompt_tokens", "output_tokens", "replica", "preempted"):
        h.update(np.ascontiguousarray(requests[col].to_numpy(dtype=np.int64)).tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_simulation_reproduces_the_recorded_run(name):
    kwargs = dict(WORKLOADS[name])
    # recorded before issue 17's per-sequence step overhead (seq_overhead_us, default 5)
    # and before the H200-fitted mfu 0.55 and serial_share 0.3 (recorded with 0.5 and the roofline's 0)
    kwargs["calibration"] = {**kwargs.get("calibration", {}), "seq_overhead_us": 0.0, "mfu": 0.5, "serial_share": 0.0}
    if name == "trace":
        kwargs["trace"] = _trace()
    cm = cost_model(
        kwargs["model"],
        kwargs["gpu"],
        kwargs["quant"],
        tensor_parallel=kwargs.get("tensor_parallel", 1),
        calibration=kwargs["calibration"],
        max_num_batched_tokens=kwargs.get("max_num_batched_tokens", 2048),
    )
    if kwargs.get("tensor_parallel", 1) > 1:
        # recorded with the all-reduce at the NVLink line rate, before issue 17's NCCL share of it (0.82)
        cm = dataclasses.replace(cm, allreduce_gb_s=cm.interconnect_gb_s)
    kwargs["cost"] = _Recorded(cm)
    if name == "window":
        # recorded before the context-window check: 3 of its lognormal prompts exceed Gemma-3-270M's
        # 32,768 tokens, served as before, now with a warning
        with pytest.warns(UserWarning, match="3 of 6000 requests exceed it"):
            result = simulate(**kwargs)
    else:
        result = simulate(**kwargs)
    s = result.summary.iloc[0]
    digest, e2e_p95, ttft_p95, utilization, throughput, preemptions, e2e_sum = GOLDEN[name]
    got = (s["e2e_p95_s"], s["ttft_p95_s"], s["utilization"], s["throughput_rps"], result.requests["e2e_s"].sum())
    assert got == pytest.approx((e2e_p95, ttft_p95, utilization, throughput, e2e_sum), rel=1e-9)
    assert int(s["preemptions"]) == preemptions
    assert _digest(result.requests) == digest
