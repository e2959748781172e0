"""Issue 39: a call's own time bound (``deadline_s`` of replay_trace, ``budget_s`` of profile) counts
from the call and covers set-up: the model probe, the ``/tokenize`` probe and the calibration.

Against a loopback server that accepts a request on one of those paths and never answers, each call
returns within 3 s of a 2 s bound. What it returns: nothing was measured, so a ``TimeoutError`` that
names the bound and the step set-up was on (documented under Raises of both).
"""

from __future__ import annotations

import time

import pandas as pd
import pytest
from hostile_server import MODEL, HostileServer

import toolkit

STEPS = {"/v1/models": "/v1/models", "/tokenize": "/tokenize"}


@pytest.mark.parametrize("path", sorted(STEPS))
def test_replay_deadline_covers_a_probe_that_never_answers(path):
    trace = pd.DataFrame({"arrival_s": [0.0, 0.1], "prompt_tokens": 40, "output_tokens": 4})
    # the server outlives the bound by far: only the client's own clock can end the call in time
    with HostileServer(hang=(path,), lifetime_s=15) as server:
        began = time.monotonic()
        with pytest.raises(TimeoutError, match=rf"deadline_s=2 s ran out during set-up, in .*{STEPS[path]}"):
            toolkit.replay_trace(trace, server.base_url, MODEL, deadline_s=2, progress=False)
        took = time.monotonic() - began
    assert took < 3, f"replay_trace(deadline_s=2) took {took:.1f} s"
    assert not server.chat, "a request was sent although set-up never finished"


@pytest.mark.parametrize("path", sorted(STEPS))
def test_profile_budget_covers_a_probe_that_never_answers(path):
    with HostileServer(hang=(path,), lifetime_s=15) as server:
        began = time.monotonic()
        with pytest.raises(TimeoutError, match=rf"budget_s=2 s ran out during set-up, in .*{STEPS[path]}"):
            toolkit.profile(server.base_url, MODEL, budget_s=2, seed=0, progress=False)
        took = time.monotonic() - began
    assert took < 3, f"profile(budget_s=2) took {took:.1f} s"
    assert not server.chat


def test_profile_budget_ends_the_waves_too():
    # every streamed answer stalls after its first chunk: the first wave is cut at the budget and the
    # others are not run, all within the budget
    with HostileServer(lifetime_s=15, stream=lambda n, body: [{"choices": []}, ...]) as server:
        began = time.monotonic()
        frame = toolkit.profile(
            server.base_url, MODEL, budget_s=2, seed=0, progress=False, output_tokens=2, repeats=1,
            context_tokens=(8, 16), prompt_tokens=(8, 16, 32), batch_sizes=(1, 2, 3),
        )  # fmt: skip
        took = time.monotonic() - began
    assert took < 3, f"profile(budget_s=2) took {took:.1f} s"
    assert len(frame) == 10  # one repeat: 2 decode, 2 + 3 batch and 3 prefill requests
    first = frame[frame["wave"] == 0]
    assert len(server.chat) == 1 and len(first) == 1
    assert first["outcome"].eq("error").all()
    assert first["error"].eq("cancelled: profile's budget_s=2 s was reached").all()
    assert frame.loc[frame["wave"] > 0, "outcome"].eq("not_run").all()
