"""Benchmark: the prefix-cache hit rate and TTFT the simulator predicts for a replay against the local
llama-server, beside what the server measured (issue 42).

One local llama-server (Gemma-3-270M, 8 slots, one unified KV cache, ``--swa-full``) is profiled once
(``toolkit.profile``) and then replays two workloads with prefix structure:

- a session workload (``toolkit.session_workload``): chat sessions sharing a few system prompts,
  replayed closed loop per session (the next turn after the answer and the think time);
- a Mooncake slice scaled to the server: five minutes of the synthetic trace (from minute 10), the
  requests whose prompt opens with one of its four most frequent first blocks (agent templates),
  lengths and blocks divided by 64 (8-token blocks) and time compressed so that it runs in 60 s.

The model is calibrated on the profile (``toolkit.calibrate``, as the report does) and each replay is
predicted by ``toolkit.simulate`` with ``backend="llamacpp"`` (the server's slots, its
``--slot-prompt-similarity`` and its host-memory prompt cache at the server's default 8192 MiB) at the
times its requests were sent. Bars (issue 42): hit rate within 5
points, TTFT p50 and p90 within 15%.

``--swa-full``: Gemma 3 has sliding-window layers, whose KV llama.cpp cannot cut back to an arbitrary
position, so without it a slot reuses a prompt only up to the checkpoints it took (where the last user
message starts, and 4 tokens before a prompt's end): two 122-token prompts sharing their first 95 of 98
words shared 1 token, an identical one 117. With the whole window kept the server reuses the common
prefix (104 and 121 tokens there), the rule the simulator models. It then takes no checkpoint at all
(``update_slots``: ``do_checkpoint`` requires ``n_swa > 0 && !swa_full``; its debug log, ``-lv 5``,
says ``do_checkpoint = no`` and creates none, where the default server creates one at 1 token and one
4 tokens before the end of a 394-token prompt), so it never cuts a prefill for one: the profile is
calibrated, and the replays predicted, without the breaks of ``toolkit._sweep.llama_server.SCHEDULING``,
with its 512-token steps (``--ubatch-size``) only; the profile runs on this same server.

A session's next turn holds the previous answer, which the slot kept (prompt and answer but its last
token): the prediction gives the simulator the session workload's ``answer_blocks``, and the answers'
lengths the replay asked for (``ignore_eos``). TTFT is measured from the send to the first streamed
content, and the simulator's requests arrive at those send times. A server iteration prefills up to
``--batch-size`` (2048) tokens from every slot as several 512-token passes and emits first tokens only
after all of them, where the prediction steps by pass: the figures of a prediction in 2048-token steps
are recorded beside it (``predicted_n_batch_steps``), to tell on an idle host which the server follows.

Both sides count whole prompts: the chat template's tokens are part of the server's counts (its
opening, 9 tokens here, is shared by every prompt), while the trace's blocks model only the text. The
replay fills a prompt of ``p`` tokens with ``p`` less the template's tokens of text blocks, so a
trace's last blocks are never sent (in the Mooncake slice requests of one length differ only there): a
single-turn trace is predicted from its blocks as sent (``_as_sent``: an opening block shared by every
prompt, the text blocks sent, then blocks for the closing tokens). The session workload's later turns
are built from the chat so far, and are predicted from the workload's blocks.

Writes reports/bench/prefix_replay.json, and each replayed request measured beside predicted (cached
tokens, TTFT) to reports/bench/prefix_replay_requests.csv. Results from a busy host are marked
(``host_busy``).
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "reports" / "bench"
SLOTS = 8
SESSIONS = {
    "num_sessions": 10, "session_rate": 0.4, "turns": 3, "think_time_s": ("exponential", 2.0),
    "user_tokens": ("lognormal", 60, 0.5), "output_tokens": ("lognormal", 12, 0.5), "system_prompt_tokens": 160,
    "system_prompts": 3, "zipf_exponent": 1.0, "prefix_block_tokens": 16, "seed": 7,
}  # fmt: skip
MOONCAKE = {"name": "mooncake-synthetic", "start_s": 600, "duration_s": 300, "token_scale": 1 / 64}
MOONCAKE_ROOTS = 4
# llama.cpp's defaults: a server iteration fills a batch of up to --batch-size (n_batch, 2048) tokens from
# every slot, and llama_decode runs it as graph passes of --ubatch-size (512) tokens; the server samples,
# so emits first tokens, only after the whole batch (update_slots in tools/server/server-context.cpp).
# The prediction steps by ubatch (the report's scheduling); steps of n_batch are recorded beside it.
UBATCH, N_BATCH = 512, 2048
MOONCAKE_SPAN_S = 60.0
# block ids outside any trace's: the chat template's opening, shared by every prompt, and the blocks that
# stand for a prompt's closing template tokens, one run per last text block sent
OPENING_BLOCK, TAIL_BLOCKS = 1 << 41, 1 << 40


def _as_sent(trace, template_tokens: int, block: int) -> list[list[int]]:
    """The blocks of single-turn prompts as the replay sent them (``toolkit._sweep.conversation``): the
    text of a ``p``-token prompt is its first ``ceil((p - template_tokens) / block)`` blocks, so the
    trace's later ids, where requests of one length differ, are never sent; the template's opening is
    one block shared by every prompt and its closing tokens follow the last text block."""
    sent = []
    for prompt, ids in zip(trace["prompt_tokens"], trace["prefix_blocks"], strict=True):
        text = list(ids[: -(-max(int(prompt) - template_tokens, 1) // block)])
        need = -(-int(prompt) // block)
        tail = [TAIL_BLOCKS + 64 * int(text[-1]) + i for i in range(need)]
        sent.append(([OPENING_BLOCK, *text] + tail)[:need])
    return sent


def _mooncake_slice(tk):
    trace = tk.load_trace(MOONCAKE["name"], **{k: v for k, v in MOONCAKE.items() if k != "name"})
    roots = [
        root for root, _ in collections.Counter(ids[0] for ids in trace["prefix_blocks"]).most_common(MOONCAKE_ROOTS)
    ]
    picked = trace[trace["prefix_blocks"].map(lambda ids: ids[0] in roots)].reset_index(drop=True)
    arrival = picked["arrival_s"] - picked["arrival_s"].min()
    picked["arrival_s"] = arrival * (MOONCAKE_SPAN_S / arrival.max())
    picked.attrs = dict(trace.attrs)
    return picked


def _compare(tk, replayed, costs, sent, name, per_request):
    """Predicted against measured for one replay: the simulator at the replay's send times. ``sent`` is the
    replayed trace (its requests are in the same order); its ``answer_blocks``, where it has them, come
    with its answers' lengths, which the server produced (``ignore_eos``). Appends the replay's requests,
    measured beside predicted, to ``per_request``."""
    requests = replayed.requests
    # in sending order, as the simulator numbers its requests, so that its rows line up with these
    ok = requests[requests["outcome"].eq("ok")].sort_values("sent_s", kind="stable")
    trace = ok[["sent_s", "prompt_tokens_target", "output_tokens", "prefix_blocks"]].rename(
        columns={"sent_s": "arrival_s", "prompt_tokens_target": "prompt_tokens"}
    )
    trace["output_tokens"] = trace["output_tokens"].astype(int)
    if "answer_blocks" in sent.columns:
        trace["output_tokens"] = sent["output_tokens"].to_numpy()[ok.index]
        trace["answer_blocks"] = sent["answer_blocks"].to_numpy()[ok.index]
    trace.attrs["prefix_block_tokens"] = replayed.params["prefix_block_tokens"]
    if "session_id" not in sent.columns:
        trace["prefix_blocks"] = _as_sent(
            trace, int(replayed.params["template_tokens"]), trace.attrs["prefix_block_tokens"]
        )
    sims = {
        step: tk.simulate(
            trace=trace.reset_index(drop=True),
            cost=cm,
            max_batch=SLOTS,
            backend="llamacpp",
            warmup_fraction=0.0,
            max_num_batched_tokens=step,
            progress=False,
        )
        for step, cm in costs.items()
    }
    sim = sims[UBATCH]
    predicted_ttft = sim.requests["ttft_s"].to_numpy() * 1000
    batch_ttft = sims[N_BATCH].requests["ttft_s"].to_numpy() * 1000
    per_request.append(
        pd.DataFrame(
            {
                "workload": name,
                "sent_s": ok["sent_s"].to_numpy(),
                "prompt_tokens": ok["prompt_tokens"].to_numpy(),
                "prompt_tokens_target": ok["prompt_tokens_target"].to_numpy(),
                "cached_tokens": ok["cached_tokens"].to_numpy(),
                "predicted_cached_tokens": sim.requests["cached_tokens"].to_numpy(),
                "ttft_ms": ok["ttft_ms"].to_numpy(),
                "server_prompt_ms": ok["server_prompt_ms"].to_numpy(),
                "predicted_ttft_ms": predicted_ttft,
            }
        )
    )
    measured_hit = float(ok["cached_tokens"].sum() / ok["prompt_tokens"].sum())
    predicted_hit = float(sim.summary["prefix_hit_rate"].iloc[0])
    row = {
        "requests": len(requests),
        "ok": len(ok),
        "prompt_tokens_mean": round(float(ok["prompt_tokens"].mean()), 1),
        "prompt_exact_share": round(float(replayed.summary["prompt_exact_share"].iloc[0]), 3),
        "output_exact_share": round(float(replayed.summary["output_exact_share"].iloc[0]), 3),
        "hit_rate": {"measured": round(measured_hit, 4), "predicted": round(predicted_hit, 4)},
        "hit_rate_points_off": round(100 * (predicted_hit - measured_hit), 2),
        "hit_rate_within_5_points": bool(abs(predicted_hit - measured_hit) <= 0.05),
    }
    for q in (50, 90):
        measured = float(np.percentile(ok["ttft_ms"], q))
        predicted = float(np.percentile(predicted_ttft, q))
        row[f"ttft_p{q}_ms"] = {
            "measured": round(measured, 1),
            "predicted": round(predicted, 1),
            "predicted_n_batch_steps": round(float(np.percentile(batch_ttft, q)), 1),
        }
        row[f"ttft_p{q}_rel_err"] = round(predicted / measured - 1, 3)
        row[f"ttft_p{q}_within_15pct"] = bool(abs(predicted / measured - 1) <= 0.15)
    return row


def main() -> None:
    import toolkit as tk
    from toolkit._model.host import measure_host
    from toolkit._report.trust_section import MODEL, QUANT
    from toolkit._sweep import host_state
    from toolkit._validation.refusal import bench_host_busy

    load_before = os.getloadavg()[0]
    started = dt.datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    host = measure_host()
    sessions = tk.session_workload(**SESSIONS)
    mooncake = _mooncake_slice(tk)
    replays, others, phase_s = {}, {}, {}
    with tk.LlamaServer(parallel=SLOTS, extra_args=["--swa-full"]) as server:
        before = host_state.sample(server.pid)
        profiled = tk.profile(server=server, repeats=1, progress=False)
        others["profile"] = host_state.conditions(before, host_state.sample(server.pid))["other_cpu_share"]
        phase_s["profile"] = round(host_state.sample(server.pid).wall_s - before.wall_s, 1)
        for name, trace, seed in (("sessions", sessions, 1), ("mooncake", mooncake, 2)):
            before = host_state.sample(server.pid)
            replays[name] = tk.replay_trace(trace, server=server, progress=False, seed=seed)
            after = host_state.sample(server.pid)
            others[name] = host_state.conditions(before, after)["other_cpu_share"]
            phase_s[name] = round(after.wall_s - before.wall_s, 1)
    fitted = tk.calibrate(profiled, MODEL, host, QUANT)
    costs = {
        step: tk.cost_model(MODEL, host, QUANT, calibration=fitted, max_num_batched_tokens=step)
        for step in (UBATCH, N_BATCH)
    }
    shares = {k: round(float(v), 4) for k, v in others.items()}
    per_request: list[pd.DataFrame] = []
    busy = bench_host_busy(
        load_before, profiled, {k: v for k, v in shares.items() if k != "profile"}, os.cpu_count() or 1
    )
    result = {
        "date": started,
        "ended": dt.datetime.now().isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - t0, 1),
        "phase_s": phase_s,
        "server": f"llama-server, Gemma-3-270M Q4_K_M, --parallel {SLOTS}, --kv-unified, --swa-full",
        "session_workload": {k: list(v) if isinstance(v, tuple) else v for k, v in SESSIONS.items()},
        "mooncake_slice": MOONCAKE | {"token_scale": "1/64", "roots": MOONCAKE_ROOTS, "span_s": MOONCAKE_SPAN_S},
        "calibration": {n: round(float(fitted[n].iloc[0]), 4) for n in ("mbu", "mfu", "serial_share")},
        "results": {
            name: _compare(tk, replayed, costs, {"sessions": sessions, "mooncake": mooncake}[name], name, per_request)
            for name, replayed in replays.items()
        },
        "turn_template_tokens": replays["sessions"].params["turn_template_tokens"],
        "others_cpu_share": shares,
        "host_load_1m_before": load_before,
        "host_load_1m_after": os.getloadavg()[0],
        "host_busy": bool(busy),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "prefix_replay.json").write_text(json.dumps(result, indent=1) + "\n")
    pd.concat(per_request, ignore_index=True).round(2).to_csv(OUT / "prefix_replay_requests.csv", index=False)
    print(json.dumps({k: result[k] for k in ("wall_s", "results", "others_cpu_share", "host_busy")}, indent=1))


if __name__ == "__main__":
    main()
