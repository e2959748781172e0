"""The HTML report: its figures, its files, and how it behaves in a real (headless) browser."""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import toolkit
from toolkit._data import load_csv
from toolkit._report import build as _report_build
from toolkit._report import cli as _report_cli
from toolkit._report import conclusion as _conclusion
from toolkit._report import measure as _measure
from toolkit._report import views as _views

HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # any name other than loopback fails to resolve, so nothing can leave the machine even by mistake
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--virtual-time-budget=20000",
    "--dump-dom",
]


def test_tiles_reproduce_the_reference_headline_figures():
    # the symbiont site shows: 41 s for 32 candidates vs 407 s one at a time; 9.1x decode
    # throughput (656 / 72, the peak, at the top limit); prefix cache 75% at 32 in flight, 74% at 1
    tiles = toolkit.stat_tiles(load_csv("reference_vllm_sweep_32_lanes.csv"))
    values = re.findall(r'class="value"[^>]*>([^<]*)<', tiles)
    assert values == ["41 s", "9.1x", "75%"]
    assert "for 32 lanes at 32 in flight, against 407 s at 1" in tiles
    assert "656 tokens/s at 32 in flight, against 72 at 1; it rises at every step" in tiles
    assert "at 32 in flight (server /metrics), against 74% at 1" in tiles


def test_the_gain_tile_names_the_peak_and_every_dip():
    # 50, 40, 60, 55 tokens/s at 1, 2, 4, 8: the peak is 60 at 4 (60 / 50 = 1.2x), and throughput
    # falls twice, at 2 (40 after 50) and at 8 (55 after 60); the top limit's gain would be 1.1x
    levels = pd.DataFrame(
        {"in_flight": [1, 2, 4, 8], "lanes": 8, "wall_s": [4.0, 5.0, 3.0, 3.0], "dec_tok_s": [50.0, 40.0, 60.0, 55.0]}
    )
    tiles = toolkit.stat_tiles(levels)
    assert re.findall(r'class="value"[^>]*>([^<]*)<', tiles)[1] == "1.2x"
    assert "peak decode throughput, 60 tokens/s at 4 in flight, against 50 at 1" in tiles
    assert "it falls at 2 in flight (40 tokens/s after 50) and at 8 in flight (55 tokens/s after 60)" in tiles


def test_a_level_without_throughput_is_named_not_skipped():
    # every lane failed at 2 in flight: 30 then 105 tokens/s is a rise, and the gap is said
    levels = pd.DataFrame({"in_flight": [1, 2, 4], "wall_s": [1.0, 0.1, 0.5], "dec_tok_s": [30.0, np.nan, 105.0]})
    assert "it rises at every step; no request completed at 2 in flight" in toolkit.stat_tiles(levels)
    assert "3.5x the 30 tokens/s at 1; it rises at every step; no request completed at 2" in (
        _conclusion.conclusion(levels)
    )


def test_the_cache_tile_states_the_highest_limit_that_reports_hits():
    # no counter at 4 in flight, so the value is the 2-lane level's 50%, set against 73% at 1
    levels = pd.DataFrame(
        {
            "in_flight": [1, 2, 4],
            "lanes": 4,
            "wall_s": [4.0, 2.0, 1.5],
            "dec_tok_s": [10.0, 20.0, 25.0],
            "prefix_hit_rate": [0.73, 0.5, float("nan")],
        }
    )
    tiles = toolkit.stat_tiles(levels)
    assert re.findall(r'class="value"[^>]*>([^<]*)<', tiles)[2] == "50%"
    assert "prefix cache at 2 in flight (server /metrics), against 73% at 1" in tiles


def test_tiles_say_when_no_prefix_counter_was_exposed():
    levels = pd.DataFrame({"in_flight": [1, 2], "lanes": 2, "wall_s": [4.0, 2.0], "dec_tok_s": [10.0, 20.0]})
    tiles = toolkit.stat_tiles(levels.assign(prefix_hit_rate=float("nan")))
    assert re.findall(r'class="value"[^>]*>([^<]*)<', tiles) == ["2.0 s", "2.0x", "n/a"]


def test_tiles_of_a_sweep_where_every_lane_failed_say_so():
    levels = pd.DataFrame(
        {"in_flight": [1, 2], "lanes": 4, "lanes_ok": [0, 0], "wall_s": [0.02, 0.01], "dec_tok_s": [0.0, float("nan")]}
    )
    tiles = toolkit.stat_tiles(levels)
    assert re.findall(r'class="value"[^>]*>([^<]*)<', tiles) == ["no lane succeeded"]
    assert "8 lanes failed" in tiles and "nan" not in tiles.lower().replace("n/a", "")


def test_tiles_without_a_successful_first_level_give_no_gain():
    levels = pd.DataFrame(
        {"in_flight": [1, 4], "lanes": 4, "lanes_ok": [0, 4], "wall_s": [0.5, 12.0], "dec_tok_s": [float("nan"), 30.0]}
    )
    values = re.findall(r'class="value"[^>]*>([^<]*)<', toolkit.stat_tiles(levels))
    assert values[:2] == ["12 s", "n/a"]


def test_decomposition_note_states_the_measured_growth():
    note = toolkit.decomposition_note(load_csv("reference_vllm_sweep_32_lanes.csv"))
    # 578.3 / 394.8 = 1.46; slot wait 5.8 s of a 40.8 s wall = 14%
    assert "394.8 s to 578.3 s (1.5x)" in note and "407.1 s to 40.8 s" in note and "(14% of wall clock)" in note
    # the 8-lane table: 0.96 x 74.0 s = 71.0 s of lane time at 1, 3.34 x 21.3 s = 71.1 s at 8: flat
    eight = toolkit.decomposition_note(load_csv("reference_vllm_sweep_8_lanes.csv"))
    assert "71.0 s to 71.1 s (1.0x)" in eight
    unknown = toolkit.decomposition_note(load_csv("reference_vllm_sweep_8_lanes.csv").drop(columns="llm_sum_s"))
    assert "cannot be told apart" in unknown


def _small_sweep() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Three levels of two lanes: a dip at 2 in flight, one retried error at 2, one lane failed at 4."""
    levels = pd.DataFrame(
        {
            "in_flight": [1, 2, 4],
            "lanes": 2,
            "wall_s": [4.0, 5.0, 2.0],
            "dec_tok_s": [50.0, 40.0, 120.0],
            "verdict": ["baseline", "batching", "mixed"],
            "elasticity": [float("nan"), 0.1, 0.45],
            "llm_ms_per_token": [20.0, 21.0, 30.0],
            "repeats": 1,
            "lanes_failed": [0, 0, 1],
        }
    )
    rows = [
        # in_flight, lane, attempt, outcome, error, final, start_s, end_s, ttft_ms, tpot_ms, e2e_ms
        (1, 0, 1, "ok", None, True, 0.0, 2.0, 100.0, 10.0, 2000.0),
        (1, 1, 1, "ok", None, True, 2.0, 4.0, 300.0, 12.0, 2000.0),
        (2, 0, 1, "error", "HTTP 500: boom", False, 0.0, 0.5, float("nan"), float("nan"), float("nan")),
        (2, 0, 2, "ok", None, True, 0.5, 5.0, 500.0, 20.0, 4500.0),
        (2, 1, 1, "ok", None, True, 0.0, 3.0, 200.0, 14.0, 3000.0),
        (4, 0, 1, "ok", None, True, 0.0, 1.0, 250.0, 8.0, 1000.0),
        (4, 1, 1, "error", "HTTP 500: boom", False, 0.0, 0.2, float("nan"), float("nan"), float("nan")),
        (4, 1, 2, "error", "HTTP 500: boom", True, 0.2, 0.4, float("nan"), float("nan"), float("nan")),
    ]
    columns = ["in_flight", "lane", "attempt", "outcome", "error", "final", "start_s", "end_s"]
    lanes = pd.DataFrame(rows, columns=[*columns, "ttft_ms", "tpot_ms", "e2e_ms"])
    return levels, lanes


def test_conclusion_names_the_peak_the_dip_the_verdict_and_the_failures():
    levels, lanes = _small_sweep()
    lines = _conclusion.conclusion(levels, lanes).splitlines()
    assert len(lines) == 3
    # peak 120 at 4 in flight = 2.4 x 50 at 1; 40 at 2 is below 50 at 1; 4 is the top limit
    assert lines[0] == (
        "Decode throughput peaks at 120 tokens/s at 4 in flight, 2.4x the 50 tokens/s at 1; it falls at 2"
        " in flight (40 tokens/s after 50). That is the top limit tried, so the server's ceiling lies there"
        " or beyond."
    )
    # elasticity 0.45 is 0.15 above batching's 0.3 and 0.25 below queueing's 0.7: nearest is batching
    assert "At 4 in flight the sweep reads mixed" in lines[1] and "it batches only in part" in lines[1]
    assert "went from 20.0 ms at 1 in flight to 30.0 ms, elasticity 0.45" in lines[1]
    assert "The reading is 0.15 from batching, from one run per level" in lines[1]
    assert lines[1].endswith("the lower limits read batching at 2.")
    # 6 lanes end on a final attempt; lane 1 at 4 ends in an error; 8 attempts - 6 finals = 2 retried;
    # the three error attempts carry the same text
    assert lines[2] == (
        "1 of 6 requests failed (1 at 4 in flight), after 2 retried attempts; the most common error"
        " (3 attempts): HTTP 500: boom."
    )


def test_conclusion_states_the_held_out_error_after_calibration():
    levels, lanes = _small_sweep()
    accuracy = pd.DataFrame(
        {
            "calibration": ["none"] * 3 + ["fitted on limits 1"] * 3,
            "split": ["fit", "holdout", "holdout"] * 2,
            "in_flight": [1, 2, 4] * 2,
            "metric": ["ttft_ms", "ttft_ms", "dec_tok_s"] * 2,
            "predicted": [300.0, 495.0, 60.0, 300.0, 330.0, 84.0],
            "measured": [100.0, 275.0, 120.0, 200.0, 300.0, 120.0],
        }
    )
    # rel_err = predicted / measured - 1: none 2.0 (fit), 0.8, -0.5; fitted 0.5 (fit), 0.1, -0.3
    accuracy["rel_err"] = accuracy["predicted"] / accuracy["measured"] - 1
    last = _conclusion.conclusion(levels, lanes, accuracy).splitlines()[-1]
    # held out after fitting: |0.1| and |-0.3|; largest 30% (decode throughput at 4, predicted low),
    # median (10% + 30%) / 2 = 20%; the fit row's 50% does not count; uncalibrated held out: 80%
    assert last == (
        "After calibration (fitted on limits 1), the serving model is still off by up to 30% on the"
        " held-out levels (2 and 4 in flight): it predicts decode throughput at 4 in flight 30% too low"
        " (84 tokens/s against 120 measured), and its median error there is 20%; uncalibrated it was off"
        " by up to 80%."
    )


def test_conclusion_of_a_queueing_server_and_of_a_single_level():
    levels = pd.DataFrame(
        {
            "in_flight": [1, 8],
            "dec_tok_s": [30.0, 33.0],
            "verdict": ["baseline", "queueing"],
            "elasticity": [float("nan"), 0.9],
            "repeats": 3,
            "dec_tok_s_ci95": [1.0, 2.5],
            "lanes_failed": [0, 0],
        }
    )
    text = _conclusion.conclusion(levels)
    # 0.9 - 0.7 = 0.2 into the queueing band; three repeats give the top level's interval
    assert "it queues" in text and "the sweep reads queueing" in text
    assert "The reading is 0.20 from mixed, from 3 runs per level" in text
    assert "95% interval is ±2.5 tokens/s" in text and text.endswith("No request failed.")
    single = _conclusion.conclusion(levels.iloc[:1])
    assert "peaks at 30 tokens/s at 1 in flight; one level only." in single
    assert "batching cannot be told from queueing" in single


@pytest.mark.parametrize(
    ("n", "warned"),
    # p of n values lies between the two largest when (n - 1) p / 100 >= n - 2: n <= 21 for p95,
    # n <= 101 for p99
    [(1, ["p95", "p99"]), (8, ["p95", "p99"]), (21, ["p95", "p99"]), (22, ["p99"]), (101, ["p99"]), (102, [])],
)
def test_sample_note_warns_where_a_percentile_is_one_of_the_two_largest(n, warned):
    note = _conclusion.sample_note(pd.Series([n, n], index=[1, 2]))
    claims = note.split("): ", 1)[1].split(". A p99")[0] if note else ""
    values = np.arange(1.0, n + 1)  # 1..n: the two largest are n - 1 and n
    for p in (95, 99):
        among_two_largest = n == 1 or np.percentile(values, p) >= n - 1
        assert among_two_largest == (f"p{p}" in warned)
        assert (f"p{p}" in claims) == (f"p{p}" in warned)
    if warned:
        assert f"{n} answered requests at every level" in note
    else:
        assert note == ""


def test_sample_note_lists_uneven_levels():
    note = _conclusion.sample_note(pd.Series([8, 30, 0, 5], index=[1, 2, 4, 8]))
    assert note.startswith("Few requests behind the percentiles (8 at 1 in flight, 30 at 2 in flight, 5 at 8")
    assert "p95 and p99 from 5 and 8 requests are the largest value or close to it" in note
    assert "p99 from 30 requests is the largest value or close to it" in note


def test_views_count_outcomes_phases_and_percentiles_by_hand():
    levels, lanes = _small_sweep()
    counts = _views._outcome_counts(lanes).set_index("in_flight")
    assert counts.loc[2].to_dict() == {
        "attempts": 3,
        "ok": 2,
        "rejected": 0,
        "error": 1,
        "retried": 1,
        "lanes_failed": 0,
    }
    assert counts.loc[4].to_dict() == {
        "attempts": 3,
        "ok": 1,
        "rejected": 0,
        "error": 2,
        "retried": 1,
        "lanes_failed": 1,
    }
    segments = _views._timeline_segments(lanes)
    lane = segments[(segments["in_flight"] == 2) & (segments["lane"] == 0)].sort_values("start_s")
    # the error 0.0-0.5 s, then the retry: first token 500 ms after 0.5 s, streaming until 5.0 s
    assert lane[["phase", "start_s", "end_s"]].values.tolist() == [
        ["failed", 0.0, 0.5],
        ["to first token", 0.5, 1.0],
        ["streaming", 1.0, 5.0],
    ]
    table = _views._latency_table(lanes).set_index("in_flight")
    # answered at 1: TTFT 100 and 300 ms: p50 200, p95 100 + 0.95 * 200 = 290; no ITL recorded, so TPOT
    assert table.loc[1, "ttft_p50_ms"] == pytest.approx(200.0)
    assert table.loc[1, "ttft_p95_ms"] == pytest.approx(290.0)
    assert table.loc[2, "e2e_p50_ms"] == pytest.approx(3750.0)
    assert table.loc[4, "requests"] == 1 and "tpot_p50_ms" in table and "itl_p50_ms" not in table
    with_itl = lanes.assign(itl_ms_p50=[9.0, 11.0, np.nan, 19.0, 13.0, 7.0, np.nan, np.nan], itl_ms_max=40.0)
    itl = _views._latency_table(with_itl).set_index("in_flight")
    assert itl.loc[1, "itl_p50_ms"] == pytest.approx(10.0) and itl.loc[1, "itl_max_ms"] == 40.0


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report of the recorded llama-server run, with a hostile model name and error text."""
    recorded = _measure._recorded_run()
    recorded.conditions["model"] = HOSTILE
    recorded.label = "llama-server " + HOSTILE
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_report_build, "_recorded_run", lambda: recorded)
        out = tmp_path_factory.mktemp("report")
        index = toolkit.build_report(out_dir=out, recorded=True, name="test", execute_notebooks=False)
    return index


def test_report_writes_html_with_static_charts_and_tables_beside_it(report):
    out = report.parent
    assert report.name == "index.html"
    charts = re.findall(r'data-chart="([^"]+)"', report.read_text())
    assert len(charts) >= 5
    for slug in charts:
        assert (out / f"{slug}.png").read_bytes()[:4] == b"\x89PNG"
        assert (out / f"{slug}.svg").read_text().lstrip().startswith("<svg")
    for table in ("levels.csv", "reference_levels.csv"):
        assert len(pd.read_csv(out / table)) >= 4


def test_report_times_each_phase_and_the_phases_add_up(report):
    timing = pd.read_csv(report.parent / "timing.csv").set_index("phase")["seconds"]
    top = timing[["measure", "charts", "notebooks", "page"]]
    assert (top >= 0).all()
    # the four phases follow one another, so they fill the total (each rounded to 0.01 s)
    assert top.sum() == pytest.approx(timing["total"], abs=0.03)
    # a recorded run is read, not measured, and no notebook was executed: no measuring phases
    assert not any(name.startswith("measure.") for name in timing.index)
    assert timing["notebooks"] < 0.5 < timing["charts"]


def test_cli_json_reports_the_seconds_of_each_phase(monkeypatch, capsys, tmp_path):
    import argparse
    import json

    (tmp_path / "conclusion.txt").write_text("fine\n")
    (tmp_path / "timing.csv").write_text("phase,seconds\nmeasure,3.5\nmeasure.sweep,2.25\ntotal,4.0\n")
    monkeypatch.setattr(_report_build, "build_report", lambda **kwargs: tmp_path / "index.html")
    parser = argparse.ArgumentParser()
    _report_cli.add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", "--recorded", "--json", "--out", str(tmp_path)])
    assert args.func(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["phase_s"] == {"measure": 3.5, "measure.sweep": 2.25, "total": 4.0}
    assert printed["conclusion"] == "fine"


def test_report_html_loads_nothing_from_elsewhere(report):
    text = report.read_text()
    # markup only: keep each <script ...> tag, drop its inlined code (the bundles contain templates)
    markup = re.sub(r"(<script\b[^>]*>).*?</script>", r"\1", text, flags=re.S | re.I)
    assert markup.count("<script") >= 3  # the bundle, the chart specs and the embedding code
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b[^>]*\b(src|href|data)\s*=", markup, flags=re.I)
    assert not re.search(r"\b(src|href)\s*=\s*[\"']?(https?:)?//", markup, flags=re.I)
    assert "vegaEmbed" in text and "vega-lite" in text.lower()  # the libraries are inlined
    assert HOSTILE not in text  # every server-provided string is escaped


def test_the_timeline_draws_the_first_repeat_of_a_repeated_sweep(tmp_path):
    _, lanes = _small_sweep()
    both = pd.concat([lanes.assign(repeat=1), lanes.assign(repeat=2)], ignore_index=True)
    section = _views._timeline_section(both, tmp_path)
    spec = json.loads(re.search(r'id="spec-timeline">(.*?)</script>', section.body).group(1))
    (rows,) = spec["datasets"].values()
    # one repeat: 5 answered attempts, each waiting then streaming, and 3 failed attempts
    assert len(rows) == 5 * 2 + 3
    assert "Only each level's first repeat is drawn." in section.body
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"


MEASURED_VIEWS = (
    "latency-distributions-per-level",
    "throughput-against-latency",
    "request-timeline",
    "successes-and-errors-per-level",
)
MODEL_SECTIONS = (
    "serving-model-the-reference-hardware",
    "queueing-where-the-closed-form-holds",
    "capacity-plan-cost-against-latency",
)


def test_report_opens_with_the_conclusion_then_measured_views_then_the_model(report):
    text = report.read_text()
    ids = re.findall(r'<section[^>]* id="([^"]+)"', text)
    assert ids[:2] == ["conclusion", "part-measured"]
    model = ids.index("part-model")
    assert set(MEASURED_VIEWS) <= set(ids[:model]) and "predicted-against-measured" in ids[:model]
    assert set(MODEL_SECTIONS) <= set(ids[model:])
    assert "<h2>About the model</h2>" in text
    for view in MEASURED_VIEWS:
        assert f'<a href="#{view}">' in text  # listed in the contents


def test_report_conclusion_names_the_verdict_and_the_held_out_error(report):
    text = report.read_text()
    conclusion = text[text.index('<section id="conclusion">') : text.index('<section class="part"')]
    # the recorded run's lane time per token: 23.905 ms at 1 in flight, 80.013 ms at 8;
    # ln(80.013 / 23.905) / ln(8) = 1.208 / 2.079 = 0.58, inside mixed (0.3 to 0.7), 0.12 from queueing
    assert "At 8 in flight the sweep reads mixed" in conclusion and "elasticity 0.58" in conclusion
    assert "0.12 from queueing, from one run per level" in conclusion
    # 8 lanes at each of 4 limits, all ok on the first attempt
    assert "All 32 requests succeeded, none retried." in conclusion
    # 1024 output tokens in 10.248 s at 8 in flight = 99.9 tokens/s; 41.8 at 1 in flight
    assert "peaks at 99.9 tokens/s at 8 in flight, 2.4x the 41.8 tokens/s at 1" in conclusion
    assert "After calibration (fitted on limits 1,4), the serving model is still off by up to" in conclusion


def test_report_views_agree_with_the_recorded_levels(report):
    out = report.parent
    text = report.read_text()
    # 8 answered requests per level: p95 and p99 sit between the two largest; warned beside both tables
    assert text.count("p95 and p99 from 8 requests are the largest value or close to it") == 2
    recorded = load_csv("llamacpp_sweep_gemma3_270m_levels.csv")
    latency = pd.read_csv(out / "latency.csv")
    # the sweep computed its TTFT and TPOT percentiles when the run was recorded
    for col in ("ttft_p50_ms", "ttft_p99_ms", "tpot_p95_ms"):
        assert latency[col].to_numpy() == pytest.approx(recorded[col].to_numpy(), rel=1e-9)
    assert latency["requests"].tolist() == [8, 8, 8, 8]
    points = pd.read_csv(out / "throughput_latency.csv")
    assert points["dec_tok_s"].to_numpy() == pytest.approx(recorded["dec_tok_s"].to_numpy())
    outcomes = pd.read_csv(out / "outcomes.csv")
    assert outcomes[["attempts", "ok", "error", "retried", "lanes_failed"]].values.tolist() == [[8, 8, 0, 0, 0]] * 4


def _serve(directory: Path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _open_in_chromium(url: str, workdir: Path) -> tuple[str, list[tuple[str, str]]]:
    """The DOM after scripts ran, and (url, network isolation key) of every request made."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run `make chromium` (Debian package chromium)")
    netlog = workdir / "netlog.json"
    cmd = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={workdir / 'profile'}", f"--log-net-log={netlog}", url]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    log = json.loads(netlog.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    requests = [
        (e["params"]["url"], e["params"].get("network_isolation_key", ""))
        for e in log["events"]
        if e["type"] == start_job and "url" in e.get("params", {})
    ]
    return dom, requests


def _page_requests(requests, origin_site: str) -> list[str]:
    # the browser's own background fetches (updates, time sync) carry another isolation key;
    # everything the page asked for is keyed by the page's site
    return [url for url, key in requests if key.startswith(origin_site)]


@pytest.fixture(scope="module")
def rendered(report, tmp_path_factory):
    server = _serve(report.parent)
    try:
        port = server.server_address[1]
        dom, requests = _open_in_chromium(f"http://127.0.0.1:{port}/index.html", tmp_path_factory.mktemp("chromium"))
    finally:
        server.shutdown()
    return dom, requests, port


def test_every_chart_rendered_in_headless_chromium(report, rendered):
    dom, _, _ = rendered
    charts = len(re.findall(r'data-chart="', report.read_text()))
    # vega-embed with the svg renderer puts one <svg class="marks"> in each chart container
    assert len(re.findall(r'<svg[^>]*class="marks"', dom)) == charts
    assert "chart failed:" not in dom.split("<script")[0]


def test_no_request_left_the_machine(rendered):
    _, requests, port = rendered
    page = _page_requests(requests, "http://127.0.0.1")
    assert f"http://127.0.0.1:{port}/index.html" in page  # the check saw the page itself
    assert all(url.startswith(f"http://127.0.0.1:{port}/") for url in page), page


def test_server_strings_render_as_text_not_markup(rendered):
    dom, _, _ = rendered
    assert "<title>pwned" not in dom and '<img src="x"' not in dom
    assert "&lt;img src=x" in dom  # shown to the reader, literally


def test_the_request_check_catches_an_external_fetch(tmp_path):
    # negative control for test_no_request_left_the_machine: a page that does reach out
    (tmp_path / "index.html").write_text('<img src="http://example.invalid/pixel.png">')
    server = _serve(tmp_path)
    try:
        port = server.server_address[1]
        _, requests = _open_in_chromium(f"http://127.0.0.1:{port}/index.html", tmp_path)
    finally:
        server.shutdown()
    assert "http://example.invalid/pixel.png" in _page_requests(requests, "http://127.0.0.1")


def test_cli_passes_its_options_and_prints_the_path(monkeypatch, capsys, tmp_path):
    import argparse

    seen = {}

    def fake_build_report(**kwargs):
        seen.update(kwargs)
        return tmp_path / "index.html"

    monkeypatch.setattr(_report_build, "build_report", fake_build_report)
    parser = argparse.ArgumentParser()
    _report_cli.add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", "--recorded", "--no-notebooks", "--name", "x", "--out", str(tmp_path)])
    assert args.func(args) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "index.html")
    assert seen == {
        "out_dir": tmp_path,
        "base_url": None,
        "model": None,
        "name": "x",
        "recorded": True,
        "run": None,
        "execute_notebooks": False,
        "progress": True,
    }
    # --run draws a run read from another tool's files
    args = parser.parse_args(["report", "--run", "results/", "--no-notebooks", "--out", str(tmp_path)])
    assert args.func(args) == 0 and seen["run"] == Path("results/") and not seen["recorded"]
    # --out is the short form of --out-dir, the name of the argument it sets
    assert (
        parser.parse_args(["report", "--out-dir", "a"]).out_dir == parser.parse_args(["report", "--out", "a"]).out_dir
    )


def test_notebook_setup_picks_an_offline_renderer():
    import altair as alt

    before = alt.renderers.active
    try:
        assert toolkit.notebook_setup("svg") == "svg" and alt.renderers.active == "svg"
        assert pd.get_option("display.max_colwidth") is None
        # anywidget is in the notebooks extra, installed by make: auto picks the interactive one
        assert toolkit.notebook_setup() == "jupyter" and alt.renderers.active == "jupyter"
    finally:
        alt.renderers.enable(before)
        pd.reset_option("display.max_colwidth")


def test_notebook_setup_follows_the_environment(monkeypatch):
    import altair as alt

    before = alt.renderers.active
    monkeypatch.setenv("TOOLKIT_NOTEBOOK_RENDERER", "svg")
    try:
        assert toolkit.notebook_setup() == "svg"
        monkeypatch.setenv("TOOLKIT_NOTEBOOK_RENDERER", "cdn")
        with pytest.raises(ValueError, match="TOOLKIT_NOTEBOOK_RENDERER"):
            toolkit.notebook_setup()
    finally:
        alt.renderers.enable(before)
        pd.reset_option("display.max_colwidth")


def test_notebook_setup_refuses_an_unknown_renderer():
    with pytest.raises(ValueError, match="renderer"):
        toolkit.notebook_setup("cdn")


def test_a_report_measured_on_a_busy_host_says_so_first(tmp_path, monkeypatch):
    from fault_server import FaultServer

    import toolkit._report.measure as measure

    cores = os.cpu_count() or 1
    monkeypatch.setattr(measure.os, "getloadavg", lambda: (cores * 0.5 + 1.0, 0.0, 0.0))  # over half the cores
    with FaultServer(tokens=3, token_delay_s=0) as srv:
        index = toolkit.build_report(
            out_dir=tmp_path, base_url=srv.base_url, model="fault-model", execute_notebooks=False, progress=False
        )
    conclusion = (tmp_path / "conclusion.txt").read_text()
    assert conclusion.startswith("Measured on a busy host")
    assert "busy host" in index.read_text()


@pytest.mark.parametrize(("others_core_s", "busy"), [(0.4, False), (8.0, True)])
def test_the_reports_busy_host_rule_counts_only_other_processes(monkeypatch, tmp_path, others_core_s, busy):
    """The server's and the client's own threads raise the load average; only others' CPU time,
    read from /proc over the sweep, says whether the host was busy."""
    from fault_server import FaultServer

    from toolkit._sweep import host_state
    from toolkit._sweep.host_state import HostSample

    cores = os.cpu_count() or 1
    # 20 core-s of wall: the server used 6, the client 1; others what the case says (> 25% is busy)
    readings = iter(
        [
            HostSample(0.0, 1.5 * cores, 0.0, 0.0, 0.0, 0.0, 0.0),
            HostSample(10.0, 1.5 * cores, 20.0, 20.0 - 7.0 - others_core_s, 0.0, 1.0, 6.0),
        ]
    )
    monkeypatch.setattr(host_state, "sample", lambda pid=None: next(readings))
    settings = {"lanes": 2, "limits": (1,), "max_tokens": 3}
    with FaultServer(tokens=3, token_delay_s=0) as srv:
        run = _measure._measure(srv.base_url, tmp_path, settings, "fault", model="fault-model", server_pid=12345)
    assert run.others["sweep"] == pytest.approx(others_core_s / 20.0)
    assert ("warning" in run.conditions) is busy
    if busy:
        assert run.conditions["warning"].startswith("Measured on a busy host: other processes took 40%")
    assert f"{others_core_s / 20:.1%} of the host's CPU" in run.conditions["other processes"]


def test_a_host_busy_in_both_ways_gets_one_busy_paragraph():
    from toolkit._report.build import busy_opening

    load = "Measured on a busy host: the load average was 3.10 on 2 cores when the sweep began."
    refused = "Measured on a busy host: others took 51% of the CPU. The fitted model is not presented. "
    assert busy_opening(load, "") == load and busy_opening("", refused) == refused
    assert busy_opening("", "") == ""
    both = busy_opening(load, refused)
    assert both.count("Measured on a busy host") == 1
    assert both == (
        "Measured on a busy host: others took 51% of the CPU. The fitted model is not presented."
        " Also, the load average was 3.10 on 2 cores when the sweep began."
    )


def test_a_local_sweep_runs_its_repeats_as_passes_with_work_between_them(tmp_path):
    # the local report alternates the sweep's passes with the profile's: each pass runs every level
    # once, `between` runs after each, and the passes come back as one sweep with two repeats a level
    from fault_server import FaultServer

    calls = []
    settings = {"lanes": 2, "limits": (1, 2), "max_tokens": 3, "repeats": 2}
    with FaultServer(tokens=3, token_delay_s=0) as srv:
        run = _measure._measure(
            srv.base_url, tmp_path, settings, "fault", model="fault-model", between=lambda: calls.append(1)
        )
    assert calls == [1, 1]
    assert run.levels["repeats"].tolist() == [2, 2] and run.levels["in_flight"].tolist() == [1, 2]
    assert sorted(run.lanes["repeat"].unique()) == [1, 2] and len(run.lanes) == 2 * 2 * 2
    assert {p.name for p in (tmp_path / "sweep").iterdir()} >= {"pass1", "pass2"}
    assert "2 run(s) per level, each a pass over every level, spread over the run" in run.conditions["sweep"]


def test_a_local_run_times_each_of_its_phases(monkeypatch, tmp_path):
    # every step of the local run advances a fake clock by a known amount: the phases must come back
    # as those amounts summed over their calls, the sweep's without the passes run between its own
    import types

    import toolkit._report.capacity as capacity_module
    import toolkit._sweep.llama_server as llama_server
    import toolkit._sweep.profile as profile_module
    import toolkit._sweep.replay as replay_module

    now = [0.0]

    def takes(seconds, result=None):
        def step(*args, **kwargs):
            now[0] += seconds
            return result

        return step

    class FakeServer:
        pid, base_url, parallel, threads = 1, "http://127.0.0.1:1", 8, 1

        def __enter__(self):
            now[0] += 5.0  # loading the model
            return self

        def __exit__(self, *exc):
            return False

    def fake_sweep(base_url, out, settings, label, *, server_pid, between):
        for _ in range(2):  # two passes of 50 s, each followed by a profile pass and a host sample
            now[0] += 50.0
            between()
        return _measure._Run(pd.DataFrame({"in_flight": [1]}), None, label)

    monkeypatch.setattr(_measure, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(llama_server, "LlamaServer", lambda parallel: FakeServer())
    monkeypatch.setattr(llama_server, "server_version", lambda: "fake")
    monkeypatch.setattr(profile_module, "profile", takes(20.0, pd.DataFrame({"repeat": [0]})))
    monkeypatch.setattr(replay_module, "replay_trace", takes(100.0, types.SimpleNamespace(requests=None)))
    monkeypatch.setattr(_measure, "measure_host", takes(8.0, pd.DataFrame({"name": ["host"]})))
    monkeypatch.setattr(_measure, "_measure", fake_sweep)
    monkeypatch.setattr(_measure, "combine_profile_passes", lambda passes: passes[0])
    monkeypatch.setattr(_measure, "best_of_hosts", lambda samples: samples[0])
    monkeypatch.setattr(_measure, "held_out_time_scale", takes(3.0, (2.0, 0.6)))
    monkeypatch.setattr(_measure, "load_trace", lambda *args, **kwargs: pd.DataFrame({"arrival_s": [0.0]}))
    monkeypatch.setattr(_measure.host_state, "sample", lambda pid=None: None)
    monkeypatch.setattr(_measure.host_state, "conditions", lambda before, after: {"other_cpu_share": 0.0})
    monkeypatch.setattr(capacity_module, "measure_capacity", takes(70.0, "the capacity run"))
    run = _measure._measure_local(tmp_path)
    # 3 host samples of 8 s, 3 profile passes of 20 s (one after each sweep pass, one after the replay),
    # 2 sweep passes of 50 s, one capacity search
    assert run.phase_s == pytest.approx(
        {"host": 24.0, "server": 5.0, "profile": 60.0, "sweep": 100.0, "replay_stretch": 3.0, "replay": 100.0,
         "capacity": 70.0}
    )  # fmt: skip
    assert run.capacity == "the capacity run"
