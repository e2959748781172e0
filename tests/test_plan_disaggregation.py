"""plan(layouts=...): xPyD fleets beside the aggregated ones (issue 44)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from toolkit import gpus, plan, simulate

ARGS = {"arrival_rate": 20.0, "prompt_tokens": 1024, "output_tokens": 256, "slo_ttft_ms": 500, "slo_tpot_ms": 40}
CANDIDATES = {"models": "Llama-3.1-8B", "gpus": ["H100 SXM", "A100 80GB"], "quants": "fp16", "backends": "vllm"}


@pytest.fixture(scope="module")
def both() -> pd.DataFrame:
    return plan(**ARGS, **CANDIDATES, tensor_parallel=(1, 2), layouts=("aggregated", "disaggregated"))


def test_default_output_is_unchanged():
    default = plan(**ARGS, **CANDIDATES, tensor_parallel=(1,))
    assert "layout" not in default.columns
    pd.testing.assert_frame_equal(default, plan(**ARGS, **CANDIDATES, tensor_parallel=(1,), layouts="aggregated"))


def test_split_rows_price_both_pools(both):
    split = both[both["layout"] != "aggregated"]
    assert set(map(tuple, split[["gpu", "tensor_parallel"]].to_numpy())) == {
        (g, tp) for g in ("H100 SXM", "A100 80GB") for tp in (1, 2)
    }
    price = gpus().set_index("name")["price_usd_hour"]
    for _, row in split.iterrows():
        x, y = int(row["prefill_replicas"]), int(row["decode_replicas"])
        assert row["layout"] == f"{x}P{y}D" and row["replicas"] == x + y
        # 730 hours a month (planner.csv) x the GPU's hourly price x GPUs
        assert row["cost_usd_month"] == pytest.approx(price[row["gpu"]] * row["tensor_parallel"] * (x + y) * 730)
        assert row["ttft_ms"] <= ARGS["slo_ttft_ms"] and row["tpot_ms"] <= ARGS["slo_tpot_ms"]
        assert row["binding_pool"] in ("prefill", "decode")


def test_cheaper_layout_is_the_cheapest_meeting_plan(both):
    for _, group in both.groupby(["gpu", "tensor_parallel"]):
        met = group[group["meets_slo"]]
        cheapest = met.loc[met["cost_usd_month"] == met["cost_usd_month"].min(), "layout"]
        expected = "aggregated" if "aggregated" in set(cheapest) else cheapest.iloc[0]
        assert set(group["cheaper_layout"]) == {expected}
    assert (np.diff(both.loc[both["meets_slo"], "cost_usd_month"].to_numpy()) >= 0).all()


def test_the_split_plan_holds_in_the_simulator(both):
    row = both[(both["layout"] != "aggregated") & (both["gpu"] == "H100 SXM") & (both["tensor_parallel"] == 1)].iloc[0]
    pools = {"prefill_replicas": int(row["prefill_replicas"]), "decode_replicas": int(row["decode_replicas"])}
    res = simulate(
        "Llama-3.1-8B", "H100 SXM", "fp16", prompt_tokens=1024, output_tokens=256, num_requests=1500,
        arrival_rate=ARGS["arrival_rate"], disaggregation=pools,
    )  # fmt: skip
    s = res.summary.iloc[0]
    assert bool(s["stable"])
    assert s["ttft_p95_s"] * 1e3 <= ARGS["slo_ttft_ms"] and s["tpot_p95_s"] * 1e3 <= ARGS["slo_tpot_ms"]


def test_disaggregated_only_and_bad_layouts():
    only = plan(**ARGS, **CANDIDATES, tensor_parallel=(1,), layouts=("disaggregated",))
    assert len(only) and (only["layout"] != "aggregated").all()
    with pytest.raises(ValueError, match="layouts must name one or both of 'aggregated', 'disaggregated'"):
        plan(**ARGS, **CANDIDATES, layouts=("xpyd",))


def test_split_rows_carry_no_speculation_figures():
    spec = {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7}
    table = plan(**ARGS, **CANDIDATES, tensor_parallel=(1,), speculation=spec, layouts=("aggregated", "disaggregated"))
    split = table[table["layout"] != "aggregated"]
    assert len(split) and split["speculation_speedup"].isna().all() and not split["speculation_pays"].any()
    assert table["speculation_pays"].dtype == bool
