"""Charts: asserted on their Vega-Lite specs (marks, encodings, data, titles), not on pixels."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from toolkit._data import load_csv
from toolkit._report import charts as _charts
from toolkit._report import panels as _panels


def _units(spec: dict) -> list[dict]:
    """Every unit (single-mark) spec inside a layered / concatenated spec, with its data resolved."""
    datasets = spec.get("datasets", {})
    out = []

    def walk(node, inherited=None):
        data = node.get("data", inherited)
        if "mark" in node:
            out.append({**node, "values": datasets.get((data or {}).get("name"), [])})
        for key in ("layer", "hconcat", "vconcat", "concat"):
            for child in node.get(key, []):
                walk(child, data)

    walk(spec)
    return out


def _mark(unit: dict) -> str:
    return unit["mark"]["type"] if isinstance(unit["mark"], dict) else unit["mark"]


def _by_mark(spec: dict, mark: str) -> list[dict]:
    return [u for u in _units(spec) if _mark(u) == mark]


def _relative_luminance(hex_color: str) -> float:
    # WCAG 2.x: sRGB channels linearised, then 0.2126 R + 0.7152 G + 0.0722 B
    channels = [int(hex_color.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(a: str, b: str) -> float:
    hi, lo = sorted((_relative_luminance(a), _relative_luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.fixture(scope="module")
def reference():
    return load_csv("reference_vllm_sweep_32_lanes.csv")


@pytest.fixture(scope="module")
def own_run():
    # the issue-5 figures for 8 lanes at limits 1/2/4/8 on this 2-core machine
    return pd.DataFrame(
        {
            "in_flight": [8, 1, 4, 2],  # unsorted on purpose
            "dec_tok_s": [65.0, 53.0, 63.0, 50.0],
            "wall_s": [8.1, 10.0, 8.4, 10.5],
            "llm_sum_s": [62.7, 9.6, 32.7, 20.6],
            "slot_wait_s": [0.0, 0.0, 0.0, 0.0],
        }
    )


def test_contrast_helper_matches_known_wcag_values():
    # black on white is the WCAG maximum 21:1; a colour against itself is 1:1
    assert _contrast("#000000", "#FFFFFF") == pytest.approx(21.0)
    assert _contrast("#777777", "#777777") == pytest.approx(1.0)


@pytest.mark.parametrize("surface", ["#FFFFFF", "#121212"])
def test_bar_hue_keeps_three_to_one_on_light_and_dark(surface):
    assert _panels.BAR_COLOR == "#00897B"  # the reference chart's hue passes both, so it is kept
    assert _contrast(_panels.BAR_COLOR, surface) >= 3.0


def test_hover_hue_is_not_used_for_information():
    # #4ECDC4 fails 3:1 on white, which is why it is confined to the hover state
    assert _contrast(_panels.HOVER_COLOR, "#FFFFFF") < 3.0


def test_decode_chart_is_one_hue_columns_from_zero_with_only_end_labels(own_run):
    spec = _charts.decode_throughput_chart(own_run, label="llama-server").to_dict()
    (bars,) = _by_mark(spec, "bar")
    (text,) = _by_mark(spec, "text")
    assert bars["encoding"]["x"]["field"] == "in_flight"
    assert bars["encoding"]["y"]["field"] == "dec_tok_s"
    assert bars["encoding"]["y"]["scale"]["zero"] is True
    color = bars["encoding"]["color"]
    assert color["value"] == _panels.BAR_COLOR and color["condition"]["value"] == _panels.HOVER_COLOR
    assert "legend" not in str(bars["encoding"])
    assert sorted(r["in_flight"] for r in bars["values"]) == [1, 2, 4, 8]
    assert [(r["in_flight"], r["dec_tok_s"]) for r in text["values"]] == [(1, 53.0), (8, 65.0)]
    assert text["encoding"]["text"]["field"] == "dec_tok_s"
    assert spec["title"]["text"] == "Decode throughput against concurrency"
    assert spec["title"]["subtitle"] == "llama-server"


def test_decode_chart_puts_the_reference_run_beside_with_its_own_scale(own_run, reference):
    spec = _charts.decode_throughput_chart(own_run, reference, label="llama-server", reference_label="vLLM").to_dict()
    assert len(spec["hconcat"]) == 2
    assert spec["resolve"]["scale"]["y"] == "independent"
    assert [p["title"] for p in spec["hconcat"]] == ["llama-server", "vLLM"]
    texts = _by_mark(spec, "text")
    # the reference chart on the symbiont site labels exactly its two end columns: 72 and 656
    assert [(r["in_flight"], r["dec_tok_s"]) for r in texts[1]["values"]] == [(1, 72), (32, 656)]
    # one hover selection per panel, distinctly named so the panels highlight independently
    assert [p["name"] for p in spec["params"]] == ["hover_run", "hover_reference"]


def test_decomposition_has_the_three_quantities_in_long_form(own_run):
    spec = _charts.decomposition_chart(own_run).to_dict()
    (lines,) = _by_mark(spec, "line")
    assert lines["encoding"]["color"]["scale"]["domain"] == ["wall clock", "summed lane time", "slot wait"]
    got = {(r["in_flight"], r["quantity"]): r["seconds"] for r in lines["values"]}
    assert len(got) == 12
    assert got[(8, "summed lane time")] == 62.7 and got[(1, "wall clock")] == 10.0


def test_decomposition_leaves_out_quantities_a_run_did_not_record():
    eight = load_csv("reference_vllm_sweep_8_lanes.csv")  # no slot wait in that table
    spec = _charts.decomposition_chart(eight.assign(llm_sum_s=[71.0, None, 63.1, 71.1])).to_dict()
    (lines,) = _by_mark(spec, "line")
    assert lines["encoding"]["color"]["scale"]["domain"] == ["wall clock", "summed lane time"]
    got = [(r["in_flight"], r["quantity"]) for r in lines["values"]]
    assert len(got) == 7 and (2, "summed lane time") not in got and (2, "wall clock") in got


def test_missing_column_names_the_argument_and_column():
    with pytest.raises(ValueError, match="levels.*dec_tok_s"):
        _charts.decode_throughput_chart(pd.DataFrame({"in_flight": [1]}))
    with pytest.raises(ValueError, match="levels must be a pandas DataFrame"):
        _charts.decomposition_chart([1, 2])
    with pytest.raises(ValueError, match="at least one row"):
        _charts.decode_throughput_chart(pd.DataFrame({"in_flight": [], "dec_tok_s": []}))


@pytest.fixture
def curve():
    batch = np.array([1, 2, 4, 8, 16, 32, 64, 128])
    agg = batch * 50.0 / (1 + batch / 40)
    return pd.DataFrame(
        {
            "batch": batch,
            "aggregate_tok_s": agg,
            "per_seq_tok_s": agg / batch,
            "tpot_ms": 1000 * batch / agg,
            "bound": ["overhead", "overhead", "memory", "memory", "memory", "compute", "compute", "compute"],
            "feasible": batch <= 48,
            "max_concurrent_seqs": 48,
            "model": "Llama-3.1-8B",
            "gpu": "H100 SXM",
            "quant": "bf16",
            "context_tokens": 2048,
        }
    )


def test_batching_chart_log_x_regions_and_kv_rule(curve):
    spec = _charts.batching_chart(curve).to_dict()
    assert len(spec["vconcat"]) == 2
    assert spec["title"]["text"] == "Continuous batching: Llama-3.1-8B, H100 SXM, bf16, 2,048 context tokens"
    lines = _by_mark(spec, "line")
    assert [u["encoding"]["y"]["field"] for u in lines] == ["aggregate_tok_s", "per_seq_tok_s"]
    assert all(u["encoding"]["x"]["scale"]["type"] == "log" for u in lines)
    # only feasible rows are joined by the line
    assert all(u["transform"] == [{"filter": "datum.feasible"}] for u in lines)
    rects = _by_mark(spec, "rect")
    regions = [(r["bound"], r["start"], r["end"]) for r in rects[0]["values"]]
    # boundaries halfway on a log axis: sqrt(2*4) and sqrt(16*32)
    assert [r[0] for r in regions] == ["overhead", "memory", "compute"]
    assert regions[0][1] == 1 and regions[-1][2] == 128
    assert regions[0][2] == pytest.approx(math.sqrt(8)) and regions[1][1] == pytest.approx(math.sqrt(8))
    assert regions[1][2] == pytest.approx(math.sqrt(512)) and regions[2][1] == pytest.approx(math.sqrt(512))
    rules = _by_mark(spec, "rule")
    assert len(rules) == 2 and rules[0]["values"][0]["batch"] == 48


def test_batching_chart_without_room_for_a_rule_says_so_in_the_subtitle(curve):
    spec = _charts.batching_chart(curve.assign(max_concurrent_seqs=1000)).to_dict()
    assert not _by_mark(spec, "rule")
    assert spec["title"]["subtitle"] == "KV-bound maximum: 1000 sequences"


def test_queueing_chart_draws_closed_form_lines_and_simulated_points_without_unstable_rows():
    util = np.array([0.5, 0.9, 1.0, 1.2])
    closed = pd.concat(
        [
            pd.DataFrame(
                {
                    "utilization": util,
                    "cs2": cs2,
                    # M/M/1-like shape; infinite from utilisation 1 on, as queue_wait reports it
                    "wait_p95_s": np.where(util < 1, (1 + cs2) / 2 * util / (1 - np.minimum(util, 0.99)), np.inf),
                }
            )
            for cs2 in (0.0, 1.0, 4.0)
        ]
    )
    simulated = closed[closed["utilization"] < 1].assign(wait_p95_s=lambda d: d["wait_p95_s"] * 1.2)
    spec = _charts.queueing_chart(closed, simulated).to_dict()
    (line,) = _by_mark(spec, "line")
    (point,) = _by_mark(spec, "point")
    assert line["encoding"]["y"]["field"] == "wait_s"
    assert line["encoding"]["y"]["scale"]["type"] == "log"
    assert line["encoding"]["color"]["field"] == "cs2"
    assert len(line["values"]) == 6 and max(r["utilization"] for r in line["values"]) == 0.9
    assert len(point["values"]) == 6
    assert spec["title"]["subtitle"] == "lines: closed form; points: simulation"


def test_queueing_chart_reads_the_percentile_asked():
    df = pd.DataFrame({"utilization": [0.5], "cs2": [1.0], "wait_p99_s": [2.0]})
    spec = _charts.queueing_chart(df, percentile=99).to_dict()
    assert _by_mark(spec, "line")[0]["values"] == [{"utilization": 0.5, "cs2": 1.0, "wait_s": 2.0}]
    with pytest.raises(ValueError, match="closed_form lacks column.*wait_p95_s"):
        _charts.queueing_chart(df)


def test_queueing_chart_takes_the_wait_model_comparison_table():
    # compare_wait_models names its columns closed_form_p95_s / simulated_p95_s
    table = pd.DataFrame(
        {
            "utilization": [0.5, 0.5, 0.5],
            "cs2": [4.0, 4.0, 1.0],
            "distribution": ["gamma", "hyperexponential", "exponential"],
            "closed_form_p95_s": [11.5, 11.5, 4.6],
            "simulated_p95_s": [12.5, 13.2, 4.55],
        }
    )
    spec = _charts.queueing_chart(table, table).to_dict()
    (line,), (point,) = _by_mark(spec, "line"), _by_mark(spec, "point")
    assert [r["wait_s"] for r in line["values"]] == [11.5, 11.5, 4.6]
    assert [r["wait_s"] for r in point["values"]] == [12.5, 13.2, 4.55]
    assert point["encoding"]["shape"]["field"] == "distribution"


@pytest.fixture
def candidates():
    return pd.DataFrame(
        {
            "model": "Llama-3.1-8B",
            "gpu": ["L4", "A10G", "H100 SXM", "L40S", "A100 80GB"],
            "quant": ["q4_k_m", "int8", "bf16", "fp8", "bf16"],
            "backend": "vllm",
            "tensor_parallel": 1,
            "replicas": [4, 3, 1, 2, 2],
            "batch": [8, 8, 32, 16, 16],
            "e2e_p95_ms": [4000.0, 3000.0, 900.0, 2500.0, 3500.0],
            "cost_usd_month": [1200.0, 2000.0, 2900.0, 2000.0, 4000.0],
            "quality": [0.9, 0.95, 1.0, 0.97, 1.0],
            "warnings": [["high variance"], [], [], [], []],
        },
        index=[10, 11, 12, 13, 14],
    )


def test_frontier_chart_highlights_joins_and_labels_the_pareto_set(candidates):
    # by hand (cost, latency, quality): 11 (A10G) is dominated by 13 (L40S: same cost, faster,
    # better quality); 14 by 12 (cheaper, faster, same quality); the rest are non-dominated
    frontier = candidates.loc[[10, 13, 12]].assign(pick=["cheapest", "", "fastest"])
    spec = _charts.frontier_chart(candidates, frontier).to_dict()
    everyone, joined = _by_mark(spec, "point")[0], _by_mark(spec, "line")[0]
    assert len(everyone["values"]) == 5
    assert [r["gpu"] for r in joined["values"]] == ["H100 SXM", "L40S", "L4"]  # sorted by latency
    assert joined["mark"]["color"] == _panels.BAR_COLOR
    (labels,) = _by_mark(spec, "text")
    assert sorted(r["label"] for r in labels["values"]) == [
        "cheapest: Llama-3.1-8B L4 q4_k_m x4",
        "fastest: Llama-3.1-8B H100 SXM bf16 x1",
    ]
    tips = {t["field"] for t in everyone["encoding"]["tooltip"]}
    assert {"model", "gpu", "quant", "backend", "tensor_parallel", "replicas", "batch", "quality"} <= tips
    assert [r["warnings"] for r in everyone["values"] if r["gpu"] == "L4"] == ["high variance"]
    assert everyone["encoding"]["x"]["field"] == "e2e_p95_ms"
    assert spec["title"]["subtitle"] == "5 candidates in 5 configurations; 3 configurations on the Pareto frontier"


def test_frontier_chart_draws_each_configuration_once_at_its_fastest_batch(candidates):
    # the same fleet (H100 SXM x1) evaluated at two more batches: same cost, slower
    slower = candidates.loc[[12, 12]].assign(batch=[8, 64], e2e_p95_ms=[1500.0, 1100.0])
    frontier = candidates.loc[[10, 13, 12]].assign(pick=["cheapest", "", "fastest"])
    spec = _charts.frontier_chart(pd.concat([candidates, slower]), frontier).to_dict()
    everyone = _by_mark(spec, "point")[0]["values"]
    h100 = [r for r in everyone if r["gpu"] == "H100 SXM"]
    assert len(everyone) == 5 and len(h100) == 1
    assert h100[0]["e2e_p95_ms"] == 900.0 and h100[0]["batch"] == "8-64"
    assert spec["title"]["subtitle"].startswith("7 candidates in 5 configurations")


def test_frontier_rows_kept_for_quality_are_highlighted_but_not_joined(candidates):
    # 14 (A100 80GB: 4000 USD, 3500 ms, quality 1.0) is dominated in the plane by 12 (2900 USD,
    # 900 ms) but not overall if 12 had lower quality; pass it as a frontier row regardless
    frontier = candidates.loc[[10, 13, 12, 14]].assign(pick="")
    spec = _charts.frontier_chart(candidates, frontier).to_dict()
    highlighted = _by_mark(spec, "point")[1]["values"]
    joined = _by_mark(spec, "line")[0]
    assert sorted(r["gpu"] for r in highlighted) == ["A100 80GB", "H100 SXM", "L4", "L40S"]
    assert [r["gpu"] for r in joined["values"]] == ["H100 SXM", "L40S", "L4"]
    assert joined["mark"]["interpolate"] == "step-after"


def test_frontier_chart_computes_the_frontier_when_not_given(candidates):
    spec = _charts.frontier_chart(candidates).to_dict()
    assert sorted(r["gpu"] for r in _by_mark(spec, "line")[0]["values"]) == ["H100 SXM", "L4", "L40S"]


def test_frontier_chart_needs_a_latency_column(candidates):
    with pytest.raises(ValueError, match="e2e_p<pct>_ms"):
        _charts.frontier_chart(candidates.drop(columns="e2e_p95_ms"))


def test_accuracy_chart_has_one_panel_per_metric_and_a_bar_per_calibration():
    table = pd.DataFrame(
        {
            "calibration": ["none", "none", "fitted", "fitted"],
            "in_flight": [1, 1, 1, 1],
            "metric": ["tpot_ms", "ttft_ms", "tpot_ms", "ttft_ms"],
            "predicted": [10.0, 50.0, 12.0, 40.0],
            "measured": [12.0, 40.0, 12.0, 40.0],
            "rel_err": [-1 / 6, 0.25, 0.0, 0.0],
        }
    )
    spec = _panels._accuracy_chart(table).to_dict()
    assert spec["facet"]["column"]["field"] == "metric"
    assert spec["spec"]["mark"]["type"] == "bar"
    assert spec["spec"]["encoding"]["xOffset"]["field"] == "calibration"
    assert spec["spec"]["encoding"]["y"]["field"] == "rel_err"
    assert len(spec["datasets"][spec["data"]["name"]]) == 4


def test_save_chart_writes_png_and_svg(tmp_path, own_run):
    png, svg = tmp_path / "c.png", tmp_path / "c.svg"
    _panels.save_chart(_charts.decode_throughput_chart(own_run), png, svg)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg.read_text()
    assert text.lstrip().startswith("<svg") and _panels.BAR_COLOR.lower() in text.lower()
