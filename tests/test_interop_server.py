"""compare_runs on real runs of the local llama-server: a changed flag is found, a repeat is not."""

from __future__ import annotations

import httpx
import pytest

import toolkit

PROMPTS = [f"Name one use of the number {i} in a single short sentence." for i in range(6)]
WARM_UP = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}


def _sweep(tmp_path, name, *, parallel):
    # a fresh server per run, so that no run finds the previous one's prompts in the prompt cache
    with toolkit.LlamaServer(parallel=parallel, threads=1, ctx_per_slot=512) as server:
        # one request first: a cold server's first answers are slower, which is no part of the flag
        httpx.post(f"{server.base_url}/v1/chat/completions", json=WARM_UP, timeout=60).raise_for_status()
        return toolkit.run_sweep(
            server.base_url,
            None,
            PROMPTS,
            limits=(2,),
            max_tokens=16,
            repeats=3,
            out_dir=tmp_path / name,
            progress=False,
        )


@pytest.mark.server
def test_compare_finds_a_changed_parallel_flag_and_not_a_repeat(tmp_path):
    base = _sweep(tmp_path, "base", parallel=2)
    repeat = _sweep(tmp_path, "repeat", parallel=2)
    one_slot = _sweep(tmp_path, "one_slot", parallel=1)

    changed = toolkit.compare_runs(tmp_path / "base", tmp_path / "one_slot", seed=1)
    # run.json records what the server said about itself (llama.cpp /props: total_slots = --parallel)
    flags = changed.conditions.set_index("condition").loc["server_flags"]
    assert "'parallel': 2" in flags["a"] and "'parallel': 1" in flags["b"]
    # one slot decodes each request alone on the server's one thread, where two slots share its steps:
    # the time per output token falls far beyond the noise; the second request in flight now waits for
    # the first, so the median TTFT grows
    metrics = changed.metrics.set_index("metric")
    assert metrics.loc["tpot_p50_ms", "beyond_noise"] and metrics.loc["tpot_p50_ms", "diff"] < 0, changed.to_text()
    assert metrics.loc["ttft_p50_ms", "diff"] > 0
    assert one_slot.levels["tpot_p50_ms"].iloc[0] < base.levels["tpot_p50_ms"].iloc[0]

    same = toolkit.compare_runs(tmp_path / "base", tmp_path / "repeat", seed=1)
    assert "server_flags" not in set(same.conditions["condition"])
    # three repeats in each run: the intervals (Welch over repeats) see what moves between repeats on a
    # shared host, which the requests of a single run cannot
    medians = same.metrics.set_index("metric").loc[["ttft_p50_ms", "e2e_p50_ms", "tpot_p50_ms"]]
    assert (medians["method"] == "Welch t over repeats").all()
    # each median is flagged by chance in 5% of repeats; E2E is TTFT plus the output's TPOTs, so a TPOT
    # flag brings an E2E flag with it and is one event, not two. One flag among TTFT and TPOT happens
    # (10%); both would happen by chance in 0.25% and mean the intervals miss the repeats' spread
    independent = medians.loc[["ttft_p50_ms", "tpot_p50_ms"], "beyond_noise"]
    assert independent.sum() <= 1, same.to_text()
    assert repeat.levels["lanes_ok"].iloc[0] == len(PROMPTS)
