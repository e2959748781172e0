"""A hostile server's numbers: absurd values in one lane's stream fail that lane alone, with a
recorded error naming the field, and never turn into a confident zero, a negative or an overflow."""

from __future__ import annotations

import email.utils
import json
import math
import time
import warnings

import httpx
import pytest
from fault_server import FaultServer
from hypothesis import given, settings
from hypothesis import strategies as st
from lane_harness import lane_records

import toolkit
from toolkit._sweep.lanes import RETRY_AFTER_CAP_S, _retry_after

TOKENS = 4
PROMPTS = [f"alpha beta gamma delta lane{i}" for i in range(3)]


def _chunk(usage: str) -> str:
    return '{"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": ' + usage + "}"


HOSTILE = {
    "400-digit completion_tokens": (
        _chunk('{"completion_tokens": 1' + "0" * 400 + ', "prompt_tokens": 6}'),
        "usage.completion_tokens",
    ),
    "5000-digit integer": (
        _chunk('{"completion_tokens": 1' + "0" * 5000 + ', "prompt_tokens": 6}'),
        "malformed SSE data line",
    ),
    "100k-deep array": (_chunk('{"completion_tokens": ' + "[" * 100_000 + "]" * 100_000 + "}"), "too deeply nested"),
    "NaN tokens": (_chunk('{"completion_tokens": NaN, "prompt_tokens": 6}'), "usage.completion_tokens"),
    "negative tokens": (_chunk('{"completion_tokens": -1000, "prompt_tokens": 6}'), "usage.completion_tokens"),
    "infinite tokens": (_chunk('{"completion_tokens": Infinity, "prompt_tokens": 6}'), "usage.completion_tokens"),
    "true as a count": (_chunk('{"completion_tokens": true, "prompt_tokens": 6}'), "usage.completion_tokens"),
    "huge cached tokens": (
        _chunk(
            '{"completion_tokens": 4, "prompt_tokens": 6, "prompt_tokens_details": {"cached_tokens": 9'
            + "9" * 450
            + "}}"
        ),
        "cached_tokens",
    ),
    "cached above prompt": (
        _chunk('{"completion_tokens": 4, "prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 500}}'),
        "exceeds prompt_tokens",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_one_hostile_number_fails_only_its_lane(case, tmp_path):
    text, field = HOSTILE[case]
    prompts = list(PROMPTS)
    prompts[1] += " [[fault:hostile_usage]]"
    with FaultServer(tokens=TOKENS, token_delay_s=0.001, usage_text=text) as server, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = toolkit.run_sweep(
            server.base_url,
            "fault-model",
            prompts,
            limits=(1, 3),
            max_tokens=8,
            tag_levels=False,
            timeout_s=5.0,
            progress=False,
            out_dir=tmp_path,
        )
    lanes = result.lanes[result.lanes["final"].astype(bool)]
    assert len(lanes) == 2 * len(prompts)  # one final record per lane and level
    bad = lanes[lanes["lane"] == 1]
    assert (bad["outcome"] == "error").all() and bad["error"].str.contains(field, regex=False).all()
    assert bad["output_tokens"].isna().all() and bad["cached_tokens"].isna().all()
    good = lanes[lanes["lane"] != 1]
    assert (good["outcome"] == "ok").all() and (good["output_tokens"] == TOKENS).all()
    # the level counts only what it measured: two good lanes of TOKENS each, no zero, no negative
    assert (result.levels["output_tokens"] == 2 * TOKENS).all()
    assert (result.levels["dec_tok_s"] > 0).all()


def test_retry_after_is_capped():
    in_2100 = email.utils.format_datetime(email.utils.parsedate_to_datetime("Fri, 01 Jan 2100 00:00:00 GMT"))
    for value in ("31536000", "1e308", in_2100):
        assert _retry_after(value) == RETRY_AFTER_CAP_S
    soon = email.utils.formatdate(time.time() + 5, usegmt=True)
    assert 3 <= _retry_after(soon) <= 6
    assert _retry_after("2") == 2.0
    assert math.isnan(_retry_after("inf")) and math.isnan(_retry_after("soon"))


@pytest.mark.parametrize("key", ["kéy-ünïcode", "key\nwith-newline", "key\x00nul"])
def test_a_key_that_cannot_be_a_header_is_refused_without_echo(key, tmp_path):
    with pytest.raises(ValueError, match="api_key must be printable ASCII") as info:
        toolkit.run_sweep("http://127.0.0.1:9", "m", ["p"], limits=(1,), api_key=key, progress=False, out_dir=tmp_path)
    assert key not in str(info.value) and key not in repr(info.value)


def test_a_key_that_is_a_common_word_does_not_rewrite_the_data(tmp_path):
    """Redaction touches only the text a credential can appear in (errors, URLs): with the key
    ``llama`` the model ``llama-3-8b`` is stored as it is, and a resume accepts it."""
    prompts = [*PROMPTS[:2], PROMPTS[2] + " [[fault:500*1]]"]
    args = dict(limits=(1,), max_tokens=8, tag_levels=False, timeout_s=5.0, progress=False, out_dir=tmp_path)
    with (
        FaultServer(
            tokens=TOKENS, token_delay_s=0.0, echo_authorization=True, require_key="llama", error_message="bad request"
        ) as server,
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", RuntimeWarning)
        first = toolkit.run_sweep(server.base_url, "llama-3-8b", prompts, api_key="llama", **args)
        again = toolkit.run_sweep(server.base_url, "llama-3-8b", prompts, api_key="llama", resume=True, **args)
    written = "".join(p.read_text() for p in tmp_path.iterdir() if p.suffix in (".json", ".jsonl", ".csv"))
    assert '"model": "llama-3-8b"' in (tmp_path / "run.json").read_text()
    assert first.params["model"] == again.params["model"] == "llama-3-8b"
    # the server echoed the key into the failed lane's error: that text is scrubbed
    failed = first.lanes[first.lanes["outcome"] == "error"]
    assert len(failed) == 1 and "request had Authorization: Bearer ***" in failed["error"].iloc[0]
    assert "Bearer llama" not in written


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"base_url": "http://127.0.0.1:99999"}, "port"),
        ({"base_url": "http://"}, "base_url"),
        ({"out_dir": 123}, "out_dir"),
        ({"metrics_url": "http://127.0.0.1:0x10/metrics"}, "metrics_url"),
    ],
)
def test_wrong_types_and_ranges_are_value_errors_naming_the_argument(kwargs, field):
    args = {"base_url": "http://127.0.0.1:9", "model": "m", "prompts": ["p"], "limits": (1,), "progress": False}
    with pytest.raises(ValueError, match=field):
        toolkit.run_sweep(**{**args, **kwargs})


def test_a_string_is_not_a_list_of_tensor_parallel_degrees():
    with pytest.raises(ValueError, match="tensor_parallel"):
        toolkit.plan(arrival_rate=1, prompt_tokens=5, output_tokens=5, tensor_parallel="12", models="Llama-3.1-8B")


# --- any JSON value in any field ---------------------------------------------------------------

_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**500, -(10**500), 2**64, -1])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
JSON_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
FIELDS = (
    "choices",
    "choice",
    "delta",
    "content",
    "reasoning_content",
    "finish_reason",
    "usage",
    "completion_tokens",
    "prompt_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "timings",
    "predicted_per_token_ms",
    "prompt_n",
    "error",
)


def _hostile_stream(values: dict) -> bytes:
    """A stream whose fields take ``values`` where given, a normal answer's elsewhere."""

    def v(name, normal):
        return values.get(name, normal)

    delta = v("delta", {"content": v("content", "tok "), "reasoning_content": v("reasoning_content", None)})
    choice = v("choice", {"index": 0, "delta": delta, "finish_reason": v("finish_reason", "stop")})
    details = v("prompt_tokens_details", {"cached_tokens": v("cached_tokens", 0)})
    usage = v(
        "usage",
        {
            "completion_tokens": v("completion_tokens", 1),
            "prompt_tokens": v("prompt_tokens", 3),
            "prompt_tokens_details": details,
        },
    )
    timings = v("timings", {"predicted_per_token_ms": v("predicted_per_token_ms", 5.0), "prompt_n": v("prompt_n", 3)})
    chunks = [{"choices": v("choices", [choice])}, {"choices": [], "usage": usage, "timings": timings}]
    if "error" in values:
        chunks[0]["error"] = values["error"]
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(values=st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, max_size=4))
def test_any_json_in_any_field_fails_at_most_its_own_lane(values):
    body = _hostile_stream(values)
    records = lane_records(lambda request: httpx.Response(200, content=body), attempts=2, lanes=2)  # never raises
    for lane in range(2):
        mine = [r for r in records if r["lane"] == lane]
        assert [r["final"] for r in mine].count(True) == 1 and mine[-1]["final"]
        for r in mine:
            assert r["outcome"] in ("ok", "error")
            for column in ("output_tokens", "prompt_tokens", "cached_tokens", "ttft_ms", "tpot_ms", "e2e_ms"):
                value = r[column]
                assert isinstance(value, float) and (math.isnan(value) or 0 <= value < math.inf), (column, value)
            if r["outcome"] == "ok":  # a count is known when the server reported it and the chunks agree
                assert math.isfinite(r["output_tokens"]) == (r["tokens_from_usage"] and not r["usage_disagrees"])
                assert not (r["cached_tokens"] > r["prompt_tokens"])
            else:
                assert r["error"] and math.isnan(r["output_tokens"])


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(usage=JSON_VALUES)
def test_a_sweep_completes_whatever_one_lane_sends_as_usage(usage):
    try:
        text = json.dumps({"choices": [], "usage": usage})
    except ValueError:  # an integer past Python's digit limit cannot even be written
        return
    prompts = [f"lane {i}" for i in range(3)]
    prompts[1] += " [[fault:hostile_usage]]"
    with FaultServer(tokens=2, token_delay_s=0, usage_text=text) as server, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = toolkit.run_sweep(server.base_url, "fault-model", prompts, limits=(3,), progress=False, tag_levels=False)
    assert len(res.lanes) == 3 and res.lanes["final"].all()
    assert res.lanes.set_index("lane").loc[[0, 2], "outcome"].eq("ok").all()
    assert res.levels.loc[0, "lanes_unfinished"] == 0
