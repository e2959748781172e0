"""No piece of the API key reaches a file, whatever the server echoes and wherever its text is cut.

A server that quotes the request's ``Authorization`` header after a run of filler characters in every
error path it has (:class:`hostile_server.HostileServer` with ``echo``: HTTP 500 bodies, SSE error
chunks, truncated SSE lines, usage counts that are text, and the ``/v1/models``, ``/tokenize``,
``/metrics`` and ``/props`` errors) is measured by a report (its sweep), a trace replay and a profile.
Filler runs from 0 to 2,000 characters, so the key falls before, across and after every cut the
harness makes. No run of six characters of the 48-character key may appear in any file written.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pytest
from hostile_server import ECHO_PATHS, FILLER_LENGTHS, MODEL, HostileServer

import toolkit

# seeded so that every 6-character piece holds at least two letters: an all-digit piece ("558108", of
# the seed "issue 39") once matched a measured time in a report, a leak that was not one
KEY = "sk-" + hashlib.sha256(b"issue 39 key 29").hexdigest()[:45]
PIECES = {KEY[i : i + 6] for i in range(len(KEY) - 5)}
CASES = len(ECHO_PATHS) * len(FILLER_LENGTHS)


def _pieces_in(root: Path) -> dict[str, set[str]]:
    hits = {}
    for path in root.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace")
            found = {p for p in PIECES if p in text}
            if found:
                hits[str(path.relative_to(root))] = found
    return hits


def _echoed_every_case(server: HostileServer) -> None:
    assert len(server.chat) >= CASES, f"only {len(server.chat)} of the {CASES} error cases were served"
    assert all(body.get("stream") for _, body in server.chat)


def test_the_key_is_48_characters_with_43_pieces():
    assert len(KEY) == 48 and len(PIECES) == 43
    assert all(sum(c.isalpha() for c in piece) >= 2 for piece in PIECES)


def test_a_report_keeps_no_piece_of_an_echoed_key(tmp_path, monkeypatch):
    from toolkit._report import build as _report

    monkeypatch.setattr(_report, "REMOTE_SWEEP", {"lanes": 32, "limits": (1, 4, 8), "max_tokens": 8})
    out = tmp_path / "report"
    with HostileServer(echo=True) as server:
        toolkit.build_report(
            out_dir=out, base_url=server.base_url, model=MODEL, execute_notebooks=False, api_key=KEY, progress=False
        )
    _echoed_every_case(server)
    lanes = pd.read_csv(out / "lanes.csv")
    errors = " ".join(lanes["error"].dropna())
    for what in ("HTTP 500", "server error in stream", "SSE data line", "usage.completion_tokens"):
        assert what in errors, f"no lane went through the {what!r} path"
    assert (out / "sweep" / "lanes.jsonl").exists() and (out / "index.html").exists()
    assert not _pieces_in(out)


def test_a_replay_keeps_no_piece_of_an_echoed_key(tmp_path):
    trace = pd.DataFrame({"arrival_s": [i * 0.002 for i in range(CASES)], "prompt_tokens": 40, "output_tokens": 4})
    with HostileServer(echo=True) as server:
        result = toolkit.replay_trace(
            trace, server.base_url, MODEL, api_key=KEY, timeout_s=5, progress=False, max_lateness_ms=1e6
        )
    _echoed_every_case(server)
    assert result.requests["error"].str.contains("HTTP 500").any()
    result.requests.to_csv(tmp_path / "replay.csv", index=False)
    (tmp_path / "replay.txt").write_text(repr(result), encoding="utf-8")
    assert not _pieces_in(tmp_path)


def test_a_profile_keeps_no_piece_of_an_echoed_key(tmp_path):
    with HostileServer(echo=True) as server:
        frame = toolkit.profile(
            server.base_url,
            MODEL,
            api_key=KEY,
            repeats=CASES // 10,
            context_tokens=(8, 16),
            prompt_tokens=(8, 16, 32),
            batch_sizes=(1, 2, 3),
            output_tokens=2,
            timeout_s=5,
            budget_s=60,
            seed=1,
            progress=False,
        )
    _echoed_every_case(server)
    assert frame["error"].str.contains("HTTP 500").any()
    frame.to_csv(tmp_path / "profile.csv", index=False)
    assert not _pieces_in(tmp_path)


@pytest.mark.parametrize("filler", range(0, 80))
def test_redact_blanks_every_piece_at_every_cut(filler):
    from toolkit._sweep.files import redact

    text = "~" * filler + "Bearer " + KEY + " tail"
    for cut in range(len(text) + 1):
        kept = redact(text[:cut], (KEY,))
        assert not any(p in kept for p in PIECES), (filler, cut, kept)
    assert redact(text, (KEY,)).endswith("Bearer *** tail")
