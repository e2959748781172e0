"""The prefix-cache hit rate the model predicts for a sweep's levels, beside the one the server measured.

A sweep's lanes send one shared system prompt and a per-lane user prompt (``toolkit._sweep.prompts``).
As the server counts them, every lane's prompt opens with the same ``shared`` tokens (the chat
template, the system prompt and the user prompts' common opening), and lane i's prompt has
``lane_tokens[i]`` tokens; both are measured once from the server's own template and tokenizer
(llama-server's ``/apply-template`` and ``/tokenize``) and recorded with the run. The sweep tags each
level run (``tag_levels``, ``toolkit._sweep.api``): a tag at the very start of the first message, so
no prompt of one level run shares a prefix with another's, while a run's lanes share the tag and
the shared tokens; the tag's tokens are a lane's measured prompt less its untagged ``lane_tokens``.
Untagged, a lane sends the same prompt at every level, and shares it whole with its earlier sends.

The model replays the sweep's requests, level after level (pass by pass where the repeats are passes),
through the simulator's llama.cpp slot cache (``toolkit._queueing.slot_cache``: ``toolkit.simulate``'s
rule for ``backend="llamacpp"``, the server's ``--parallel`` slots and its host-memory prompt cache) on the measured timeline: a request
takes a slot when it was sent and frees it when its answer came. A level's predicted hit rate is its
requests' cached prompt tokens over their prompt tokens, as the server's ``/metrics`` counts them. The
slots reuse the common prefix; a server on a sliding-window model without ``--swa-full`` (the report's)
reuses only up to its checkpoints (where the last user message starts, and 4 tokens before a prompt's
end: ``toolkit._sweep.llama_server``), a few tokens fewer per request here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from toolkit._queueing.prefix_segments import SLOT_PROMPT_SIMILARITY, prefix_caches

__all__: list[str] = []

COLUMN = "predicted_prefix_hit_rate"
# a level's requests are replayed this long after the previous level's last answer (s)
_LEVEL_GAP_S = 1.0
# KV tokens free: more than the sweep's prompts, so no idle slot is purged
_ROOM = 10**12
# the server's host prompt cache (--cache-ram, 8192 MiB by default) holds every prompt of a sweep: no limit
_HOST_TOKENS = -1


def shared_prefix_tokens(
    base_url: str, system_prompt: str, prompts: list[str], api_key: str | None = None
) -> int | None:
    """Tokens every lane's prompt shares as the server counts them (its chat template and tokenizer:
    llama-server's ``/apply-template`` then ``/tokenize``), or None where the server has no such endpoints."""
    import httpx  # the HTTP client loads only when a server is measured

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    tokens = []
    try:
        with httpx.Client(base_url=base_url, headers=headers, timeout=30.0) as client:
            for prompt in prompts:
                messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": prompt}]
                text = client.post("/apply-template", json={"messages": messages}).raise_for_status().json()["prompt"]
                body = {"content": text, "add_special": True, "parse_special": True}
                tokens.append(client.post("/tokenize", json=body).raise_for_status().json()["tokens"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None
    if not tokens:
        return None
    shared = min(map(len, tokens))
    for other in tokens[1:]:
        shared = next((i for i, (a, b) in enumerate(zip(tokens[0], other, strict=False)) if a != b), shared)
    return int(shared), [len(t) for t in tokens]


def sweep_trace(lanes: pd.DataFrame, shared: int, lane_tokens: list[int]) -> pd.DataFrame:
    """The sweep's answered requests as a trace with one-token prefix blocks, in the order they were sent:
    level after level (``repeat`` first where recorded), each at ``start_s`` after its level began, which
    is ``_LEVEL_GAP_S`` after the previous level's last answer (``end_s``). A level run whose prompts
    exceed their untagged ``lane_tokens`` was tagged: its blocks are its own, and its lanes share the tag
    and the ``shared`` tokens (module notes)."""
    keys = [k for k in ("repeat", "in_flight") if k in lanes.columns]
    done = lanes[lanes["prompt_tokens"].notna() & lanes["output_tokens"].gt(0)]
    done = done.sort_values([*keys, "start_s"], kind="stable").reset_index(drop=True)
    prompt = done["prompt_tokens"].to_numpy(dtype=np.int64)
    lane = done["lane"].to_numpy(dtype=np.int64)
    if lane.max() >= len(lane_tokens):
        raise ValueError(f"lane_tokens has {len(lane_tokens)} lanes; the sweep's lanes go to {lane.max()}")
    offset, run, common = np.empty(len(done)), np.zeros(len(done), dtype=np.int64), np.empty(len(done), np.int64)
    end = done["end_s"].to_numpy(dtype=float)
    begin = 0.0
    for k, rows in enumerate(done.groupby(keys, sort=True).indices.values()):  # sorted keys: the sending order
        offset[rows] = begin
        begin += end[rows].max() + _LEVEL_GAP_S
        tag = int((prompt[rows] - np.asarray(lane_tokens)[lane[rows]]).min())
        run[rows] = k if tag > 0 else -1  # a tagged run's blocks are its own
        common[rows] = shared + max(tag, 0)
    if np.any(common > prompt):
        raise ValueError(f"shared={shared} and the level tag exceed a prompt ({prompt.min()} tokens at least)")
    rows = np.repeat(np.arange(len(done)), prompt)
    position = np.arange(rows.size) - np.repeat(np.cumsum(prompt) - prompt, prompt)
    owner = np.where(position < common[rows], -1, lane[rows])
    keys_ = np.stack([run[rows], owner, position], axis=1)
    ids = np.unique(keys_, axis=0, return_inverse=True)[1].reshape(-1)
    trace = pd.DataFrame(
        {
            "arrival_s": offset + done["start_s"].to_numpy(dtype=float),
            "end_s": offset + end,
            "prompt_tokens": prompt,
            "output_tokens": done["output_tokens"].to_numpy(dtype=np.int64),
            "in_flight": done["in_flight"].to_numpy(),
            "prefix_blocks": [tuple(b) for b in np.split(ids, np.cumsum(prompt)[:-1])],
        }
    )
    trace.attrs["prefix_block_tokens"] = 1
    return trace


def predicted_hit_rates(
    lanes: pd.DataFrame, *, shared: int, lane_tokens: list[int], slots: int, similarity: float = SLOT_PROMPT_SIMILARITY
) -> pd.Series:
    """Per in-flight limit, the hit rate of the sweep's requests (``sweep_trace``) on ``slots`` llama.cpp slots
    (the simulator's slot cache, ``--slot-prompt-similarity`` ``similarity``) on the measured timeline: each
    request takes a slot when it was sent, and its slot falls idle, keeping its prompt, when its answer
    came (the answers that came at the same time first)."""
    trace = sweep_trace(lanes, shared, lane_tokens)
    cache = prefix_caches(trace, None, "llamacpp", 1, slots, 1, similarity, _HOST_TOKENS)[0]
    prompt = trace["prompt_tokens"].to_numpy(dtype=np.int64)
    events = sorted(
        [(t, 0, r) for r, t in enumerate(trace["end_s"])] + [(t, 1, r) for r, t in enumerate(trace["arrival_s"])]
    )
    cached = np.zeros(len(trace), dtype=np.int64)
    for _, sent, r in events:
        if sent:
            cached[r] = cache.admit(r, _ROOM, int(prompt[r]))
        else:
            cache.finish(r, _ROOM)
    frame = pd.DataFrame({"in_flight": trace["in_flight"], "cached": cached, "prompt": prompt})
    sums = frame.groupby("in_flight")[["cached", "prompt"]].sum()
    return (sums["cached"] / sums["prompt"]).rename(COLUMN)


def with_prediction(
    levels: pd.DataFrame, lanes: pd.DataFrame | None, prefix: tuple[int, list[int]] | None, slots: int
) -> pd.DataFrame:
    """``levels`` with the model's hit rate per level (``predicted_prefix_hit_rate``) where the run recorded
    its requests and its lanes' prefix (``shared_prefix_tokens``' answer); else as given, with the
    reason the prediction is missing in ``attrs["prefix_prediction"]``. The sweep is closed loop (a lane
    is sent when an earlier one has been answered), so which prompts a request finds depends on which
    answers had come when it was sent, which the measured times say (``predicted_hit_rates``), not on a
    model of the server's speed; the server's KV holds the sweep's few prompts whole (its idle slots are
    never purged)."""
    out = levels.copy()
    if lanes is None:
        out.attrs["prefix_prediction"] = "no requests recorded"
        return out
    if prefix is None:
        out.attrs["prefix_prediction"] = "not recorded (the lanes' shared prefix length)"
        return out
    shared, lane_tokens = prefix
    rates = predicted_hit_rates(lanes, shared=shared, lane_tokens=lane_tokens, slots=slots)
    out[COLUMN] = out["in_flight"].map(rates)
    out.attrs["prefix_prediction"] = (
        f"the simulator's {slots} llama.cpp slots on the measured timeline, a shared prefix of {shared} tokens"
    )
    return out
