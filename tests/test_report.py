"""The HTML report: its figures, its files, and how it behaves in a real (headless) browser."""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pandas as pd
import pytest

import toolkit
from toolkit._data import load_csv
from toolkit._report import build as _report_build
from toolkit._report import cli as _report_cli
from toolkit._report import measure as _measure

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
    # throughput (656 / 72); 74-76% prefix cache
    tiles = toolkit.stat_tiles(load_csv("reference_vllm_sweep_32_lanes.csv"))
    values = re.findall(r'class="value"[^>]*>([^<]*)<', tiles)
    assert values == ["41 s", "9.1x", "74-76%"]
    assert "for 32 lanes at 32 in flight, against 407 s at 1" in tiles


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


def test_report_html_loads_nothing_from_elsewhere(report):
    text = report.read_text()
    # markup only: keep each <script ...> tag, drop its inlined code (the bundles contain templates)
    markup = re.sub(r"(<script\b[^>]*>).*?</script>", r"\1", text, flags=re.S | re.I)
    assert markup.count("<script") >= 3  # the bundle, the chart specs and the embedding code
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b[^>]*\b(src|href|data)\s*=", markup, flags=re.I)
    assert not re.search(r"\b(src|href)\s*=\s*[\"']?(https?:)?//", markup, flags=re.I)
    assert "vegaEmbed" in text and "vega-lite" in text.lower()  # the libraries are inlined
    assert HOSTILE not in text  # every server-provided string is escaped


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
        "execute_notebooks": False,
    }
