"""Issue 39, trace replay: an unsorted trace is sent in order of arrival (as ``simulate`` reads it),
prompts are built as they are sent (not all before the first), and a server whose calibration counts
would make prompts far too long (or short) is refused with a message, not believed."""

from __future__ import annotations

import time

import pandas as pd
import pytest
from hostile_server import MODEL, HostileServer

import toolkit


def test_an_unsorted_trace_is_sent_in_order_of_arrival():
    # rows in file order arrive at 0.3, 0.0, 0.2, 0.1 s; max_tokens tells them apart at the server
    trace = pd.DataFrame({"arrival_s": [0.3, 0.0, 0.2, 0.1], "prompt_tokens": 40, "output_tokens": [4, 1, 3, 2]})
    with HostileServer() as server:
        result = toolkit.replay_trace(trace, server.base_url, MODEL, exact_output=False, progress=False)
    assert [body["max_tokens"] for _, body in server.chat] == [1, 2, 3, 4]
    received = [t for t, _ in server.chat]
    gaps = [b - a for a, b in zip(received, received[1:], strict=False)]
    assert all(0.05 < g < 0.2 for g in gaps), gaps  # 0.1 s apart, as the trace says
    requests = result.requests
    assert requests["trace_row"].tolist() == [0, 1, 2, 3]  # rows stay in trace order
    assert (requests["sent_s"] - requests["arrival_s"]).abs().max() < 0.05
    assert not result.summary.iloc[0]["fell_behind"]


def test_prompts_are_built_as_they_are_sent():
    # 400 rows of 50,000-token prompts, one every 10 s: building every prompt first takes seconds of
    # CPU (and hundreds of MB) before the first send; built as sent, a 2 s deadline sends one row
    trace = pd.DataFrame({"arrival_s": [10.0 * i for i in range(400)], "prompt_tokens": 50_000, "output_tokens": 4})
    with HostileServer() as server:
        began = time.monotonic()
        result = toolkit.replay_trace(trace, server.base_url, MODEL, deadline_s=2, progress=False)
        took = time.monotonic() - began
    assert took < 3, f"replay_trace(deadline_s=2) took {took:.1f} s"
    assert len(server.chat) == 1
    assert result.summary.iloc[0]["not_sent"] == 399


@pytest.mark.parametrize("tokens_per_word", [1 / 240, 50.0])
def test_a_server_that_lies_in_calibration_is_refused(tokens_per_word):
    # the calibration's two requests (16 and 256 words) are counted tokens_per_word per word: 1/240
    # would make every prompt 240 times its target in words, 50 a fiftieth
    trace = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": 4000, "output_tokens": 4})
    believed = r"tokens per word; a count from 0.25 to 8 is believed"
    with HostileServer(tokens_per_word=tokens_per_word) as server, pytest.raises(ConnectionError, match=believed):
        toolkit.replay_trace(trace, server.base_url, MODEL, progress=False)
    assert not server.chat
