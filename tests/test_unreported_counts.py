"""Issue 39: a token count the server did not report is NaN, with a warning that says which field was
missing and how many answers lacked it; a count that the chunks received contradict is flagged.

Each server here (:class:`hostile_server.HostileServer`) streams ``TOKENS`` one-word content chunks
and answers the calibration requests honestly; what differs is the end of the stream.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hostile_server import MODEL, TOKENS, HostileServer, normal_stream

import toolkit
from toolkit._sweep.records import USAGE_CHUNK_FACTOR, USAGE_CHUNK_SLACK

ROWS = 4


def _without_usage(n, body):
    return [c for c in normal_stream(n, body) if not (isinstance(c, dict) and "usage" in c)]


def _closed_after_finish(n, body):
    chunks = normal_stream(n, body)
    return chunks[: 1 + TOKENS + 1] + [None]  # role, content, finish_reason, then the connection closes


def _null_fields(n, body):
    return [*normal_stream(n, body)[:-2], {"choices": [], "usage": {"prompt_tokens": None, "completion_tokens": None}}, "[DONE]"]  # fmt: skip


def _replay(stream):
    trace = pd.DataFrame({"arrival_s": [0.01 * i for i in range(ROWS)], "prompt_tokens": 40, "output_tokens": TOKENS})
    with HostileServer(stream=stream) as server:
        result = toolkit.replay_trace(trace, server.base_url, MODEL, timeout_s=5, progress=False, max_lateness_ms=1e6)
    assert len(server.chat) == ROWS
    return result


@pytest.mark.parametrize("stream", [_without_usage, _closed_after_finish, _null_fields])
def test_a_replay_reports_unreported_counts_as_unknown(stream):
    result = _replay(stream)
    requests, summary = result.requests, result.summary.iloc[0]
    assert requests["outcome"].eq("ok").all()
    assert requests["content_chunks"].eq(TOKENS).all()  # what arrived is still recorded
    assert requests["output_tokens"].isna().all() and requests["prompt_tokens"].isna().all()
    assert math.isnan(summary["output_exact_share"]) and math.isnan(summary["prompt_exact_share"])
    assert math.isnan(summary["output_tok_s"])
    assert summary["output_unknown"] == ROWS and summary["prompt_unknown"] == ROWS
    text = " ".join(result.warnings)
    assert f"{ROWS} of {ROWS} answers carried no usage.completion_tokens" in text
    assert f"{ROWS} of {ROWS} answers carried no usage.prompt_tokens" in text


def _claims(tokens):
    def stream(n, body):
        chunks = [{"choices": [{"delta": {"content": f" w{i}"}}]} for i in range(64)]
        usage = {"prompt_tokens": 43, "completion_tokens": tokens}
        return [*chunks, {"choices": [{"delta": {}, "finish_reason": "length"}]}, {"choices": [], "usage": usage}, "[DONE]"]  # fmt: skip

    return stream


def test_a_completion_count_the_chunks_contradict_is_flagged_not_believed():
    result = _replay(_claims(10**9))  # 64 chunks received, a billion tokens claimed
    requests, summary = result.requests, result.summary.iloc[0]
    assert requests["usage_disagrees"].all() and requests["output_tokens"].isna().all()
    assert math.isnan(summary["output_tok_s"])  # not 1e9 tokens over a fraction of a second
    assert "contradict" in " ".join(result.warnings)


@pytest.mark.parametrize(
    ("claimed", "flagged"),
    [
        (64 * USAGE_CHUNK_FACTOR + USAGE_CHUNK_SLACK, False),  # the edge of the stated tolerance
        (64 * USAGE_CHUNK_FACTOR + USAGE_CHUNK_SLACK + 1, True),
        ((64 - USAGE_CHUNK_SLACK) // USAGE_CHUNK_FACTOR, False),
        ((64 - USAGE_CHUNK_SLACK) // USAGE_CHUNK_FACTOR - 1, True),
    ],
)
def test_the_tolerance_is_as_stated(claimed, flagged):
    requests = _replay(_claims(claimed)).requests
    assert requests["usage_disagrees"].eq(flagged).all()
    assert requests["output_tokens"].isna().eq(flagged).all()
    if not flagged:
        assert requests["output_tokens"].eq(claimed).all()


def test_a_sweep_reports_unreported_counts_as_unknown():
    with HostileServer(stream=_without_usage) as server:
        result = toolkit.run_sweep(
            server.base_url, MODEL, ["a b", "c d", "e f"], limits=(1,), metrics_url=False, progress=False
        )
    lanes, level = result.lanes, result.levels.iloc[0]
    assert lanes["outcome"].eq("ok").all() and lanes["content_chunks"].eq(TOKENS).all()
    assert lanes["output_tokens"].isna().all()
    assert math.isnan(level["output_tokens"]) and math.isnan(level["dec_tok_s"])
    assert "3 of 3 answers carried no usage.completion_tokens" in level["reason"]
