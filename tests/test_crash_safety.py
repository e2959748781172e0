"""A sweep killed (SIGKILL) or interrupted (SIGINT) mid-level keeps every finished lane, and resumes.

The sweep runs in a child process against a :class:`fault_server.FaultServer` in this process, so the
server can count what reached it. Six lanes at in-flight limit 2: lanes 0, 1 and 2 answer at once,
lanes 3 and 4 stall after their first token (the first time only), lane 5 waits for a permit. Once
lanes 0-2 are on disk and both stalled lanes have reached the server, the child is signalled: the
moment is chosen by state, never by a sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_server import FaultServer

import toolkit

ROOT = Path(__file__).resolve().parent.parent
STALL = "[[fault:stall_mid*1]]"
PROMPTS = [f"shared words for every lane number {i}" for i in range(6)]
PROMPTS[3] += f" {STALL}"
PROMPTS[4] += f" {STALL}"
DONE_FIRST = [0, 1, 2]
WAIT_S = 30  # upper bound on every wait below; each ends as soon as its condition holds

# The child acts as a sweep started from a terminal, where Ctrl-C raises KeyboardInterrupt: a test
# run started in the background (`make test &`) hands its children SIGINT ignored.
CHILD = """
import json, signal, sys, warnings
signal.signal(signal.SIGINT, signal.default_int_handler)
import toolkit
url, out, prompts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
warnings.simplefilter("ignore")
try:
    toolkit.run_sweep(url, "fault-model", prompts, limits=(2,), max_tokens=8, tag_levels=False,
                      timeout_s=60, out_dir=out, progress=False)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("finished", flush=True)
"""


def _wait_for(condition, what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"gave up after {WAIT_S} s waiting for {what}")
        time.sleep(0.02)


def _lines(out: Path) -> list[str]:
    path = out / "lanes.jsonl"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _records(out: Path) -> list[dict]:
    text = (out / "lanes.jsonl").read_text(encoding="utf-8")
    assert text.endswith("\n"), "the last line of lanes.jsonl is torn"
    return [json.loads(line) for line in text.splitlines()]  # every line parses


def _start_child(server: FaultServer, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TOOLKIT_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, server.base_url, str(out), json.dumps(PROMPTS)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_until_mid_level(server: FaultServer, out: Path) -> subprocess.Popen:
    child = _start_child(server, out)
    try:
        _wait_for(lambda: len(_lines(out)) >= len(DONE_FIRST) or child.poll() is not None, "lanes 0-2 on disk")
        _wait_for(lambda: len(server.chat_requests(STALL)) >= 2 or child.poll() is not None, "both stalls")
    except BaseException:
        child.kill()
        child.wait()
        raise
    assert child.poll() is None, f"the sweep ended early: {child.communicate()}"
    return child


def _served_lanes(server: FaultServer) -> set[int]:
    return {PROMPTS.index(r["prompt"]) for r in server.chat_requests() if r["finished"]}


@pytest.fixture
def server():
    with FaultServer(tokens=4, token_delay_s=0.001, stall_s=WAIT_S) as srv:
        yield srv


def test_sigkill_mid_level_keeps_every_finished_lane_and_resume_runs_only_the_rest(server, tmp_path):
    out = tmp_path / "sweep"
    child = _run_until_mid_level(server, out)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=WAIT_S)

    records = _records(out)
    on_disk = {r["lane"] for r in records if r["final"] and r["outcome"] == "ok"}
    assert _served_lanes(server) == set(DONE_FIRST)  # what the server finished before the kill
    assert on_disk == set(DONE_FIRST)  # all of it is on disk, nothing more claimed
    assert len(records) == len(DONE_FIRST)

    before = len(server.chat_requests())
    result = toolkit.run_sweep(
        server.base_url,
        "fault-model",
        PROMPTS,
        limits=(2,),
        max_tokens=8,
        tag_levels=False,
        timeout_s=10,
        out_dir=out,
        resume=True,
        progress=False,
    )
    rerun = server.chat_requests()[before:]
    assert sorted(PROMPTS.index(r["prompt"]) for r in rerun) == [3, 4, 5]  # only the unfinished lanes
    final = result.lanes[result.lanes["final"].astype(bool)]
    assert sorted(final["lane"]) == list(range(6)) and (final["outcome"] == "ok").all()
    row = result.levels.iloc[0]
    assert row["lanes_ok"] == 6 and row["output_tokens"] == 6 * 4
    # the level's wall clock spans two processes, so it is unknown rather than the second one's
    assert row["wall_s"] != row["wall_s"] and "resume" in row["reason"]
    assert len(_records(out)) == 6


def test_sigint_stops_cleanly_after_writing_what_it_has(server, tmp_path):
    out = tmp_path / "sweep"
    child = _run_until_mid_level(server, out)
    child.send_signal(signal.SIGINT)
    stdout, stderr = child.communicate(timeout=WAIT_S)

    assert child.returncode == 130 and "interrupted" in stdout, (child.returncode, stdout, stderr)
    assert "Traceback" not in stderr, stderr
    records = _records(out)
    finished = {r["lane"] for r in records if r["final"] and r["outcome"] == "ok"}
    assert finished == set(DONE_FIRST)
    # the two lanes in flight are on record as interrupted, not as finished or as zero tokens
    cut = [r for r in records if r["lane"] in (3, 4)]
    assert sorted(r["lane"] for r in cut) == [3, 4]
    assert all(r["outcome"] == "error" and r["error"] and r["output_tokens"] is None for r in cut)
    run = json.loads((out / "run.json").read_text())
    assert "interrupted" in run["status"]
    assert (out / "levels.csv").exists()

    before = len(server.chat_requests())
    result = toolkit.run_sweep(
        server.base_url,
        "fault-model",
        PROMPTS,
        limits=(2,),
        max_tokens=8,
        tag_levels=False,
        timeout_s=10,
        out_dir=out,
        resume=True,
        progress=False,
    )
    rerun = server.chat_requests()[before:]
    assert sorted(PROMPTS.index(r["prompt"]) for r in rerun) == [3, 4, 5]
    final = result.lanes[result.lanes["final"].astype(bool)]
    assert sorted(final["lane"]) == list(range(6)) and (final["outcome"] == "ok").all()


def test_resume_of_a_finished_sweep_sends_nothing(server, tmp_path):
    out = tmp_path / "sweep"
    kwargs = dict(limits=(1, 2), max_tokens=8, tag_levels=True, timeout_s=10, out_dir=out, progress=False)
    prompts = PROMPTS[:3]
    first = toolkit.run_sweep(server.base_url, "fault-model", prompts, **kwargs)
    sent = len(server.chat_requests())
    again = toolkit.run_sweep(server.base_url, "fault-model", prompts, resume=True, **kwargs)
    assert len(server.chat_requests()) == sent == 6
    assert list(again.levels["lanes_ok"]) == list(first.levels["lanes_ok"]) == [3, 3]


def test_resume_refuses_a_folder_holding_a_different_sweep(server, tmp_path):
    out = tmp_path / "sweep"
    kwargs = dict(limits=(1,), max_tokens=8, timeout_s=10, out_dir=out, progress=False)
    toolkit.run_sweep(server.base_url, "fault-model", PROMPTS[:2], **kwargs)
    with pytest.raises(ValueError, match="different"):
        toolkit.run_sweep(server.base_url, "fault-model", PROMPTS[:3], resume=True, **kwargs)
    with pytest.raises(ValueError, match="already holds a sweep"):
        toolkit.run_sweep(server.base_url, "fault-model", PROMPTS[:2], **kwargs)
