"""Our serving model against the reference vLLM sweep (data/reference_vllm_sweep_32_lanes.csv).

The reference served prism-ml/Bonsai-8B-unpacked (an 8B model in bf16) with vLLM on one RTX PRO 6000
Blackwell. We stand Llama-3.1-8B in for it (same size class and format; its exact geometry barely
matters for single-stream decode, which reads the ~16 GB of weights once per token).

Two questions:

1. ``single_stream_check``: does the datasheet (1,792 GB/s) with the default MBU predict the
   measured 72 tok/s at one lane in flight?
2. ``concurrency_check``: why did 32 lanes in flight give 9.1x the decode throughput rather than
   32x? Each lane is a retry ladder of up to 10 sequential attempts, and the table gives only
   totals per level (output and prompt tokens, lanes that succeeded). The retry model:

   - a lane that produced no compiling candidate (``lanes - lanes_ok``) used all 10 attempts;
   - with ``ok_attempts="first"`` a successful lane succeeded at its first attempt (failures are
     systematic per prompt, as the reference notes for the sieve prompts); with
     ``"geometric"`` every attempt succeeds independently with the probability ``p`` that makes
     ``(1 - p)^10`` the failed share, so successful lanes take a truncated-geometric number;
   - every attempt of a level emits the same number of tokens: the level's output tokens over its
     attempts, and sends the level's prompt tokens over its attempts, of which the prefix-hit share
     is served from the cache.

   Which lanes fail is drawn at random (``draws`` seeds); a lane is simulated as one request whose
   output is its attempts' tokens back to back (the retries are sequential on the same in-flight
   permit and the chat history keeps growing, as the KV of one long request does). The simulator
   then runs the closed-loop sweep; the level's wall clock is its slowest lane.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from toolkit._args import check_choice, check_int
from toolkit._calibration.calibrate import calibrate
from toolkit._calibration.predict import predict_sweep
from toolkit._data import load_csv
from toolkit._model.curves import batching_curve
from toolkit._model.serving import cost_model

__all__ = ["reference_sweep"]

REFERENCE_CSV = "reference_vllm_sweep_32_lanes.csv"
_REFERENCE_LANES = (8, 32)


def reference_sweep(lanes: int = 32) -> pd.DataFrame:
    """The published vLLM concurrency sweep this toolkit compares against (an RTX PRO 6000 Blackwell).

    Parameters
    ----------
    lanes : int
        Which table: the 32-lane sweep (in-flight limits 1..32) or the 8-lane one (limits 1..8).

    Returns
    -------
    pandas.DataFrame
        One row per in-flight limit with the columns of ``SweepResult.levels`` that the table
        reports (``in_flight``, ``wall_s`` in s, ``llm_sum_s`` in s, ``dec_tok_s`` in tokens/s, ...)
        and its ``source``.
    """
    if isinstance(lanes, bool) or lanes not in _REFERENCE_LANES:
        raise ValueError(f"lanes must be one of {', '.join(map(str, _REFERENCE_LANES))}; got {lanes!r}")
    return load_csv(f"reference_vllm_sweep_{lanes}_lanes.csv")


MODEL, GPU, QUANT = "Llama-3.1-8B", "RTX PRO 6000 Blackwell", "bf16"
MAX_ATTEMPTS = 10  # the reference's retry budget per lane
MAX_NUM_SEQS = 32  # the reference's vLLM --max-num-seqs


def _attempts(lanes: int, ok: int, ok_attempts: str, rng: np.random.Generator) -> np.ndarray:
    attempts = np.full(lanes, MAX_ATTEMPTS)
    winners = rng.permutation(lanes)[:ok]
    if ok_attempts == "first":
        attempts[winners] = 1
    else:
        q = ((lanes - ok) / lanes) ** (1 / MAX_ATTEMPTS)  # per-attempt failure probability
        k = np.arange(1, MAX_ATTEMPTS + 1)
        weights = (1 - q) * q ** (k - 1)
        attempts[winners] = rng.choice(k, size=ok, p=weights / weights.sum())
    return attempts


def _per_attempt(row: pd.Series, attempts: np.ndarray) -> tuple[float, float]:
    total = attempts.sum()
    return row["output_tokens"] / total, row["prompt_tokens"] / total


def single_stream_check(ok_attempts: str = "first") -> pd.DataFrame:
    """Predict single-stream decode of the reference (8B bf16 on an RTX PRO 6000) from the datasheet.

    Returns one row: ``context_tokens`` (mean KV per sequence: an attempt's prompt plus half its
    output, from the table's level 1), ``predicted_tpot_ms``, ``predicted_tok_s`` (default MBU),
    ``roofline_tok_s`` (MBU 1: the datasheet bandwidth fully used), ``measured_tok_s`` (72: output
    tokens / wall at one in flight), ``measured_llm_tok_s`` (output tokens / summed inference time,
    which leaves out the client's work between requests), ``rel_err`` (predicted vs measured),
    ``implied_mbu`` (the MBU that reproduces the measured rate, fitted by ``calibrate``),
    ``mbu`` (the default used).
    """
    check_choice("ok_attempts", ok_attempts, ("first", "geometric"))
    row = load_csv(REFERENCE_CSV).set_index("in_flight").loc[1]
    attempts = _attempts(int(row["lanes"]), int(row["lanes_ok"]), ok_attempts, np.random.default_rng(0))
    tokens, prompt = _per_attempt(row, attempts)
    context = int(round(prompt + tokens / 2))
    cm = cost_model(MODEL, GPU, QUANT)
    tpot = cm.step_ms(1, context)
    roofline = cost_model(MODEL, GPU, QUANT, mbu=1.0, step_overhead_ms=0.0).step_ms(1, context)
    measured = float(row["dec_tok_s"])
    # one TPOT observation of 1000/72 ms at batch 1; only MBU is fitted
    observation = pd.DataFrame(
        {
            "in_flight": [1],
            "lane": [0],
            "ttft_ms": [np.nan],
            "tpot_ms": [1e3 / measured],
            "prompt_tokens": [round(prompt)],
            "output_tokens": [round(tokens)],
            "cached_tokens": [0],
        }
    )
    implied = calibrate(observation, MODEL, GPU, QUANT, fit=("mbu",))
    return pd.DataFrame(
        [
            {
                "model": cm.model["name"],
                "gpu": cm.gpu["name"],
                "quant": cm.quant["name"],
                "context_tokens": context,
                "weights_gb": cm.weights_bytes / 1e9,
                "bandwidth_gb_s": cm.bandwidth_gb_s,
                "mbu": cm.mbu,
                "predicted_tpot_ms": tpot,
                "predicted_tok_s": 1e3 / tpot,
                "roofline_tok_s": 1e3 / roofline,
                "measured_tok_s": measured,
                "measured_llm_tok_s": float(row["output_tokens"] / row["llm_sum_s"]),
                "rel_err": 1e3 / tpot / measured - 1,
                "implied_mbu": float(implied["mbu"].iloc[0]),
            }
        ]
    )


def concurrency_check(ok_attempts: str = "first", draws: int = 20, calibration: object = None) -> pd.DataFrame:
    """Explain the reference's decode-throughput gain per level with the simulator and a retry model.

    Returns one row per level: the measured ``wall_s``, ``dec_tok_s``, ``tok_s_gain``,
    ``achieved_concurrency`` (llm_sum / wall); the retry model's ``attempts`` (total),
    ``attempts_per_lane``, ``tokens_per_attempt`` and ``slowest_lane_tokens`` (mean over draws);
    ``ceiling_tok_s_gain``: aggregate decode tokens/s of a full batch of ``in_flight`` sequences over
    that of one, from ``batching_curve`` (the gain if every lane ran the whole level); the
    simulated sweep with equal lanes (``even_wall_s``, ``even_tok_s_gain``: level output tokens split
    evenly, no retry variance) and with the retry model (``predicted_wall_s`` mean, with
    ``predicted_wall_min_s`` / ``predicted_wall_max_s`` over the draws, ``predicted_dec_tok_s``,
    ``predicted_tok_s_gain`` against the predicted level 1, ``predicted_achieved_concurrency``),
    and ``wall_rel_err`` (predicted vs measured wall).
    """
    check_choice("ok_attempts", ok_attempts, ("first", "geometric"))
    draws = check_int("draws", draws, low=1)
    ref = load_csv(REFERENCE_CSV)
    rows = []
    for _, row in ref.iterrows():
        limit, lanes = int(row["in_flight"]), int(row["lanes"])
        hit = float(row["prefix_hit_rate"])
        sims, attempts_drawn, slowest = [], [], []
        for seed in range(draws):
            attempts = _attempts(lanes, int(row["lanes_ok"]), ok_attempts, np.random.default_rng(seed))
            tokens, prompt = _per_attempt(row, attempts)
            output = np.maximum(np.round(attempts * tokens), 1)
            sims.append(_sweep([limit], lanes, prompt, output, hit, calibration).iloc[0])
            attempts_drawn.append(attempts.sum())
            slowest.append(output.max())
        sim = pd.DataFrame(sims)
        tokens, prompt = row["output_tokens"] / np.mean(attempts_drawn), row["prompt_tokens"] / np.mean(attempts_drawn)
        even = _sweep([limit], lanes, prompt, row["output_tokens"] / lanes, hit, calibration).iloc[0]
        context = int(round(prompt + tokens / 2))
        curve = batching_curve(
            MODEL, GPU, QUANT, context, batch_sizes=[1, min(limit, MAX_NUM_SEQS)], calibration=calibration
        )
        rows.append(
            {
                "in_flight": limit,
                "wall_s": float(row["wall_s"]),
                "dec_tok_s": float(row["dec_tok_s"]),
                "tok_s_gain": float(row["tok_s_gain"]),
                "achieved_concurrency": float(row["llm_sum_s"] / row["wall_s"]),
                "attempts": float(np.mean(attempts_drawn)),
                "attempts_per_lane": float(np.mean(attempts_drawn)) / lanes,
                "tokens_per_attempt": tokens,
                "slowest_lane_tokens": float(np.mean(slowest)),
                "ceiling_tok_s_gain": float(curve["aggregate_tok_s"].iloc[1] / curve["aggregate_tok_s"].iloc[0]),
                "even_wall_s": float(even["wall_s"]),
                "even_dec_tok_s": float(even["dec_tok_s"]),
                "predicted_wall_s": float(sim["wall_s"].mean()),
                "predicted_wall_min_s": float(sim["wall_s"].min()),
                "predicted_wall_max_s": float(sim["wall_s"].max()),
                "predicted_dec_tok_s": float(sim["dec_tok_s"].mean()),
                "predicted_achieved_concurrency": float(sim["achieved_concurrency"].mean()),
            }
        )
    out = pd.DataFrame(rows)
    out["even_tok_s_gain"] = out["even_dec_tok_s"] / out["even_dec_tok_s"].iloc[0]
    out["predicted_tok_s_gain"] = out["predicted_dec_tok_s"] / out["predicted_dec_tok_s"].iloc[0]
    out["wall_rel_err"] = out["predicted_wall_s"] / out["wall_s"] - 1
    return out


def _sweep(limits, lanes, prompt, output, hit, calibration) -> pd.DataFrame:
    return predict_sweep(
        MODEL,
        GPU,
        QUANT,
        prompt_tokens=prompt,
        output_tokens=output,
        lanes=lanes,
        limits=limits,
        calibration=calibration,
        cached_tokens=prompt * hit,
        max_batch=MAX_NUM_SEQS,
    )
