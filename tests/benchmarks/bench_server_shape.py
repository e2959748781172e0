"""Benchmark: how the local llama-server's step time follows the batch, and how it drifts (issue 16).

The trust loop's held-out replay misses by more than the sweep does. This benchmark measures the two
things a cost model needs from the server, with nothing else running, in rounds that interleave the
conditions so that the host's drift spreads over all of them:

- the decode step (median gap between tokens after every prompt of the wave is in) at 1 to 8
  sequences together, prompts of about 100 tokens, 40 output tokens each;
- a prefill alone (TTFT of one request, one output token) at about 50, 200 and 500 prompt tokens,
  each right after a round's decode waves, as a replayed request meets the server.

Then, on the same server, the report's trust loop in part: the standard profile, the calibration,
and the report's held-out trace slice replayed four times (arrivals stretched x3, as the report
does, and x6, alternating), each against the same calibrated model, to show how far the replay's
own verdict moves between identical runs.

Writes reports/bench/server_shape.json: per batch size and prompt length the median, lowest and
highest over rounds (ms); the step's departure from the least-squares line through batches 2-8 (a
cost model linear in the batch, with its own step of one sequence, can follow no more than that
line); the prefill's ms per prompt token; each replay's median |error| (p50 and p90 of TTFT, TPOT,
E2E) and signed errors; and the host's load. Results from a busy host are marked.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import random
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "reports" / "bench"
ROUNDS = 3
BATCHES = range(1, 9)
PREFILL_WORDS = (8, 40, 100)  # about 5 tokens per numbered word, with the chat template: ~50, ~200, ~500
DECODE_WORDS, DECODE_TOKENS = 20, 40
REPLAY_TIME_SCALES = (3, 6, 3, 6)
_VOCAB = ("apple", "river", "stone", "cloud", "green", "table", "music", "paper", "light", "house")


def _prompt(rng: random.Random, words: int) -> str:
    # a number on every word keeps each prompt distinct, so no prefix is reused from the cache
    return " ".join(f"{rng.choice(_VOCAB)}{rng.randint(0, 9999)}" for _ in range(words))


async def _stream(client: httpx.AsyncClient, url: str, text: str, max_tokens: int) -> dict:
    body = {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    sent, times, usage = time.perf_counter(), [], {}
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            usage = event.get("usage") or usage
            choices = event.get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                times.append(time.perf_counter())
    return {"sent": sent, "times": np.array(times), "prompt_tokens": usage.get("prompt_tokens")}


async def _measure(url: str) -> tuple[dict, dict]:
    rng = random.Random(0)
    steps: dict[int, list[float]] = {k: [] for k in BATCHES}
    prefills: dict[int, list[tuple[int, float]]] = {w: [] for w in PREFILL_WORDS}
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        for _ in range(ROUNDS):
            for k in BATCHES:
                wave = [_stream(client, url, _prompt(rng, DECODE_WORDS), DECODE_TOKENS) for _ in range(k)]
                done = await asyncio.gather(*wave)
                # gaps after the last first token: every sequence of the wave is decoding
                start = max(float(d["times"][0]) for d in done)
                gaps = [np.diff(d["times"])[d["times"][1:] > start + 1e-3] for d in done]
                steps[k].append(float(np.median(np.concatenate(gaps))) * 1e3)
            for words in PREFILL_WORDS:
                one = await _stream(client, url, _prompt(rng, words), 1)
                prefills[words].append((int(one["prompt_tokens"]), (float(one["times"][0]) - one["sent"]) * 1e3))
    return steps, prefills


def _summary(values: list[float]) -> dict:
    return {
        "median_ms": round(float(np.median(values)), 1),
        "low_ms": round(min(values), 1),
        "high_ms": round(max(values), 1),
    }


def _replays(server, host) -> list[dict]:
    import toolkit as tk
    from toolkit._report.measure import HELD_OUT_TRACE, HELD_OUT_TRACE_NAME
    from toolkit._report.trust_section import MODEL, QUANT
    from toolkit._validation.trust import replay_accuracy

    calibration = tk.calibrate(tk.profile(server=server, progress=False), MODEL, host, QUANT)
    cm = tk.cost_model(MODEL, host, QUANT, calibration=calibration)
    out = []
    for time_scale in REPLAY_TIME_SCALES:
        trace = tk.load_trace(HELD_OUT_TRACE_NAME, **{**HELD_OUT_TRACE, "time_scale": time_scale})
        requests = tk.replay_trace(trace, server=server, progress=False).requests
        acc = replay_accuracy(requests, cm, max_batch=max(BATCHES))
        acc = acc[acc["metric"].ne("output_tok_s")]
        out.append(
            {
                "time_scale": time_scale,
                "requests": len(trace),
                "median_abs_error": round(float(acc["rel_err"].abs().median()), 3),
                "rel_err": {f"{r.metric} p{r.percentile:.0f}": round(float(r.rel_err), 3) for r in acc.itertuples()},
            }
        )
    return out


def main() -> None:
    from toolkit._model.host import measure_host
    from toolkit._sweep.llama_server import LlamaServer, server_version

    load_before = os.getloadavg()[0]
    host = measure_host()  # before the server starts, as the report does
    with LlamaServer(parallel=max(BATCHES)) as server:
        steps, prefills = asyncio.run(_measure(server.base_url))
        replays = _replays(server, host)
        threads = server.threads
    load_after = os.getloadavg()[0]
    medians = {k: float(np.median(v)) for k, v in steps.items()}
    batched = [k for k in BATCHES if k >= 2]
    slope, intercept = np.polyfit(batched, [medians[k] for k in batched], 1)
    decode = {
        str(k): {
            **_summary(steps[k]),
            "line_ms": round(float(intercept + slope * k), 1) if k >= 2 else None,
            "off_line": round(medians[k] / float(intercept + slope * k) - 1, 3) if k >= 2 else None,
        }
        for k in BATCHES
    }
    prefill = {}
    for rows in prefills.values():
        tokens = int(np.median([t for t, _ in rows]))
        ms = [m for _, m in rows]
        prefill[str(tokens)] = {**_summary(ms), "ms_per_token": round(float(np.median(ms)) / tokens, 2)}
    cores = os.cpu_count() or 1
    busy = load_before > cores / 2  # before the server starts: other work, not the server and client
    result = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "server": f"llama-server {server_version()}, --parallel {max(BATCHES)}, --threads {threads}",
        "rounds": ROUNDS,
        "decode_step": decode,
        "decode_line": {
            "batches": "2-8",
            "intercept_ms": round(float(intercept), 1),
            "per_sequence_ms": round(float(slope), 1),
        },
        "decode_step_max_off_line": round(
            max(abs(v["off_line"]) for v in decode.values() if v["off_line"] is not None), 3
        ),
        "decode_step_widest_round_spread": round(max(v["high_ms"] / v["low_ms"] - 1 for v in decode.values()), 3),
        "prefill_alone": prefill,
        "replays": replays,
        "host_load_1m_before": load_before,
        "host_load_1m_after": load_after,
        "host_busy": busy,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "server_shape.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    if busy:
        print("host was busy: these figures are not representative", file=sys.stderr)


if __name__ == "__main__":
    main()
