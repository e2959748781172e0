"""A broken or hostile server cannot hang, flood, mislead or corrupt a sweep (issue 12's list).

Every server here is a :class:`fault_server.FaultServer` on loopback; the hostile behaviours (a
trickle of bytes, a line without end, a gzip bomb, a huge or NaN ``/metrics`` page, a redirect to
another origin) are its faults. Time bounds are generous upper limits on what must end, never speed
targets.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest
from fault_server import FaultServer

import toolkit
from toolkit._sweep.bounded import MAX_LINE_BYTES
from toolkit._sweep.lanes import BACKOFF_BASE_S

ROOT = Path(__file__).resolve().parent.parent


def sweep(srv: FaultServer, prompts, **kw) -> toolkit.SweepResult:
    kw.setdefault("limits", (1,))
    kw.setdefault("tag_levels", False)
    return toolkit.run_sweep(kw.pop("base_url", srv.base_url), "fault-model", prompts, progress=False, **kw)


# --- 3: time is bounded as a whole, not per read -------------------------------------------------


def test_a_trickling_server_cannot_stretch_a_request_past_timeout_s():
    # a byte every 0.3 s never lets a per-read timeout of 1.5 s fire: only a whole-request one can
    with FaultServer(trickle_s=0.3) as srv:
        res = sweep(srv, ["[[fault:trickle]] a", "b"], timeout_s=1.5)
    lanes = res.lanes.set_index("lane")
    assert lanes.loc[0, "outcome"] == "error" and "timeout_s=1.5" in lanes.loc[0, "error"]
    assert lanes.loc[1, "outcome"] == "ok"


def test_scrape_metrics_timeout_bounds_the_whole_read():
    # a byte every 0.2 s: a per-read timeout of 1 s would wait for ever; the whole-read one fires
    with (
        FaultServer(metrics_mode="trickle", trickle_s=0.2) as srv,
        pytest.raises(httpx.TimeoutException, match="timeout_s=1"),
    ):
        toolkit.scrape_metrics(f"{srv.root_url}/metrics", timeout_s=1)


def test_the_deadline_bounds_the_metrics_scrapes():
    with FaultServer(metrics_mode="trickle", trickle_s=0.2) as srv:
        began = time.monotonic()
        with pytest.warns(RuntimeWarning, match="stopped early"):
            res = sweep(srv, ["a"], repeats=3, deadline_s=3)
        took = time.monotonic() - began
    # a hang bound, not a speed target: the first scrape is cut at the 3 s deadline, where a
    # per-scrape limit of 10 s would take over 10 s
    assert took < 3 + 4
    assert res.stopped


def test_retries_after_errors_back_off_exponentially():
    # two 500s then an answer: waits of at least d/2 with d = base, then 2 * base
    with FaultServer() as srv:
        res = sweep(srv, ["[[fault:500*2]] a"], attempts=3)
    starts = res.lanes.sort_values("attempt")["start_s"].to_numpy()
    ends = res.lanes.sort_values("attempt")["end_s"].to_numpy()
    assert list(res.lanes.sort_values("attempt")["outcome"]) == ["error", "error", "ok"]
    assert starts[1] - ends[0] >= BACKOFF_BASE_S / 2
    assert starts[2] - ends[1] >= BACKOFF_BASE_S


# --- 4: credentials go only to the origin they came with ---------------------------------------


def _metrics_auth(other: FaultServer) -> list:
    return [r["authorization"] for r in other.other_requests if r["path"].endswith("/metrics")]


def test_the_api_key_never_reaches_a_metrics_url_on_another_origin():
    with FaultServer(require_key="sk-chat") as srv, FaultServer() as other:
        res = sweep(srv, ["a"], api_key="sk-chat", metrics_url=f"{other.root_url}/metrics")
    assert res.lanes["outcome"].eq("ok").all()
    assert _metrics_auth(other) and all(a is None for a in _metrics_auth(other))
    assert all(r["authorization"] == "Bearer sk-chat" for r in srv.requests)


def test_base_url_userinfo_stays_with_the_base_url():
    with FaultServer() as srv, FaultServer() as other:
        base = srv.base_url.replace("http://", "http://user:pw@")
        sweep(srv, ["a"], base_url=base, metrics_url=f"{other.root_url}/metrics")
    assert all(a is None for a in _metrics_auth(other))
    assert srv.requests[0]["authorization"].startswith("Basic ")


def test_a_metrics_url_keeps_its_own_credentials_beside_an_api_key():
    with FaultServer() as srv, FaultServer() as other:
        url = other.root_url.replace("http://", "http://mon:secret@") + "/metrics"
        sweep(srv, ["a"], api_key="sk-chat", metrics_url=url)
    import base64

    expected = "Basic " + base64.b64encode(b"mon:secret").decode()
    assert set(_metrics_auth(other)) == {expected}


def test_metrics_api_key_goes_to_the_metrics_origin_only():
    with FaultServer() as srv, FaultServer() as other:
        sweep(srv, ["a"], api_key="sk-chat", metrics_url=f"{other.root_url}/metrics", metrics_api_key="sk-mon")
    assert set(_metrics_auth(other)) == {"Bearer sk-mon"}
    assert {r["authorization"] for r in srv.requests} == {"Bearer sk-chat"}


def test_a_redirect_to_another_origin_is_not_followed():
    with FaultServer() as other, FaultServer(redirect_to=f"{other.base_url}/chat/completions") as srv:
        res = sweep(srv, ["[[fault:redirect]] a"], api_key="sk-chat")
    assert res.lanes.loc[0, "outcome"] == "error" and "HTTP 307" in res.lanes.loc[0, "error"]
    assert other.requests == []  # nothing, credentials or not, went to the other origin


# --- 6: memory is bounded -----------------------------------------------------------------------


def test_a_line_without_end_fails_its_own_lane():
    with FaultServer(huge_bytes=8 << 20) as srv:
        res = sweep(srv, ["[[fault:huge_line]] a", "b"], limits=(2,))
    lanes = res.lanes.set_index("lane")
    assert f"longer than {MAX_LINE_BYTES:,} bytes" in lanes.loc[0, "error"]
    assert lanes.loc[1, "outcome"] == "ok"


def test_a_gzip_bomb_fails_its_own_lane():
    with FaultServer(huge_bytes=64 << 20) as srv:
        res = sweep(srv, ["[[fault:gzip_bomb]] a", "b"], limits=(2,))
    lanes = res.lanes.set_index("lane")
    assert lanes.loc[0, "outcome"] == "error" and "longer than" in lanes.loc[0, "error"]
    assert lanes.loc[1, "outcome"] == "ok"


def test_a_huge_metrics_page_is_refused_with_a_reason():
    with FaultServer(metrics_mode="huge", huge_bytes=20 << 20) as srv:
        res = sweep(srv, ["a"])
        with pytest.raises(ValueError, match="larger than"):
            toolkit.scrape_metrics(f"{srv.root_url}/metrics")
    assert res.lanes["outcome"].eq("ok").all()
    assert "larger than" in res.levels.loc[0, "reason"]


# --- 12: unknown counters are said to be unknown ------------------------------------------------


def test_nan_counters_give_nan_with_their_own_reason():
    with FaultServer(metrics_mode="nan") as srv:
        res = sweep(srv, ["a"])
    level = res.levels.iloc[0]
    assert pd.isna(level["prefix_hit_rate"]) and pd.isna(level["server_output_tokens"])
    assert "not a count" in level["reason"]


# --- 7: one sweep per out_dir -------------------------------------------------------------------


def test_a_second_sweep_on_the_same_out_dir_fails_naming_the_owner(tmp_path):
    lock = {"pid": os.getppid(), "host": os.uname().nodename, "session": "x", "since_utc": "now"}
    (tmp_path / ".lock").write_text(json.dumps(lock))  # a live process (this test's parent) holds it
    with FaultServer() as srv, pytest.raises(ValueError, match=f"in use by another sweep \\(pid {os.getppid()}"):
        sweep(srv, ["a"], out_dir=tmp_path)
    assert not (tmp_path / "lanes.jsonl").exists()


def test_a_stale_lock_is_taken_over_and_released(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = {"pid": dead.pid, "host": os.uname().nodename, "session": "x", "since_utc": "then"}
    (tmp_path / ".lock").write_text(json.dumps(lock))
    with FaultServer() as srv:
        res = sweep(srv, ["a"], out_dir=tmp_path)
    assert res.lanes["outcome"].eq("ok").all()
    assert not (tmp_path / ".lock").exists()


def test_two_sweeps_at_once_in_one_process(tmp_path):
    import asyncio

    async def both(url):
        kwargs = dict(limits=(1,), tag_levels=False, out_dir=tmp_path, progress=False, max_tokens=4)
        return await asyncio.gather(
            toolkit.sweep(url, "fault-model", ["a", "b"], **kwargs),
            toolkit.sweep(url, "fault-model", ["a", "b"], **kwargs),
            return_exceptions=True,
        )

    with FaultServer(token_delay_s=0.05) as srv:
        results = asyncio.run(both(srv.base_url))
    errors = [r for r in results if isinstance(r, ValueError)]
    assert len(errors) == 1 and "in use by another sweep" in str(errors[0])
    records = [json.loads(line) for line in (tmp_path / "lanes.jsonl").read_text().splitlines()]
    assert len(records) == 2 and len({r["session"] for r in records}) == 1


# --- 2: the files a kill leaves are enough to resume, or to refuse -----------------------------


def _cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TOOLKIT_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, "-m", "toolkit", "sweep", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_after_level_one_then_resume(tmp_path):
    out = tmp_path / "sweep"
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"prompt number {i}" for i in range(4)) + "\n")
    common = ["--model", "fault-model", "--prompts", str(prompts), "--limits", "1,2,4", "--no-tag", "--quiet"]
    with FaultServer(tokens=8, token_delay_s=0.1) as srv:
        child = _cli("--base-url", srv.base_url, *common, "--max-tokens", "8", "--out", str(out))
        end = time.monotonic() + 60
        # levels.csv is replaced after runs.csv: once it holds level 1, both tables do
        levels_file = out / "levels.csv"
        while not (levels_file.exists() and len(pd.read_csv(levels_file)) >= 1):
            assert time.monotonic() < end and child.poll() is None, "level 1 never finished"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()
        run = json.loads((out / "run.json").read_text())
        assert run["status"] == "running" and run["params"]["max_tokens"] == 8
        level_one_wall = float(pd.read_csv(out / "levels.csv").set_index("in_flight").loc[1, "wall_s"])
        assert level_one_wall > 0

        changed = _cli("--base-url", srv.base_url, *common, "--max-tokens", "9", "--out", str(out), "--resume")
        _, err = changed.communicate(timeout=60)
        assert changed.returncode == 2, err
        assert err.startswith("error:") and "max_tokens: 8 -> 9" in err and "Traceback" not in err

        plain = _cli("--base-url", srv.base_url, *common, "--max-tokens", "8", "--out", str(out), "--resume")
        _, err = plain.communicate(timeout=120)
        assert plain.returncode == 0, err
    levels = pd.read_csv(out / "levels.csv").set_index("in_flight")
    assert levels.loc[1, "wall_s"] == pytest.approx(level_one_wall)
    assert (levels["lanes_ok"] == 4).all() and (levels["lanes_unfinished"] == 0).all()
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "complete" and len(run["sessions"]) == 2
    assert not (out / ".lock").exists()  # the killed session's lock was stale and taken over
