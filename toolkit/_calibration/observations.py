"""Observations for the fit: a sweep's lanes or levels, or a profile, as TTFT and TPOT the cost model predicts.

A sweep gives, per lane and in-flight limit, a time to first token and a time per output token. Each
becomes one observation that the ONE cost model (:class:`toolkit._model.serving.CostModel`) predicts:

- TPOT: one decode step of ``b`` sequences, each holding ``prompt + output/2`` KV tokens (the mean
  over its decode): ``cm.step_ms(b, b * context)``.
- TTFT: the lane arrives while ``m`` other sequences decode, waits for the running step to end
  (half a decode step on average, when ``m > 0``), and is prefilled in one step together with the
  ``m`` decodes and with the lanes that arrived at the same moment (its "wave"):
  ``min(m, 1) 0.5 cm.step_ms(m, m context) + cm.step_ms(m, m context, W, cached, N) +
  request_overhead_ms``, where ``W`` is the uncached prompt tokens (``prompt - cached``) of the
  wave and ``N`` its prompts, each ending in that step. Alone at one in flight this is
  ``cm.ttft_ms(prompt, cached)``. With the lanes' ``start_s`` and ``end_s`` (the harness records
  them), the wave is the lanes of the level that started within half a decode step (the lane's
  TPOT) of it, and ``m`` the lanes still running when it started; without them, the first
  ``in_flight`` lanes (lane order, first attempt) form the first wave with ``m = 0``, and every
  later lane arrives alone with ``m = b - 1``.

``b``, the decode batch a lane saw, is the achieved concurrency of its level (summed inference time
over the level's wall clock: the time-averaged number of requests in flight) when the level is known,
else ``min(in_flight, lanes at that level)``; with the lanes' ``start_s`` and ``end_s`` it is the
mean number of attempts running (itself included) while the lane decoded. It is clipped to
``[1, in_flight]``.

A profile (:func:`toolkit.profile`) needs none of this guessing: its cells were designed so that each
request's conditions are known (see :func:`_from_profile`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__: list[str] = []


def is_profile(data: object) -> bool:
    """Whether ``data`` is the frame of :func:`toolkit.profile` (it has a ``cell`` column)."""
    return isinstance(data, pd.DataFrame) and "cell" in data.columns


def observations(data: object) -> pd.DataFrame:
    """Turn sweep lanes, levels, a SweepResult or a profile into TTFT and TPOT observations (module docstring).

    Returns a frame with ``kind`` (``ttft``/``tpot``), ``in_flight``, ``batch``, ``prompt_tokens``,
    ``cached_tokens``, ``context_tokens``, ``wave_tokens``, ``wave_prompts``, ``decoding`` and
    ``measured_ms``; from a profile also ``cell`` (``decode``, ``batch``, ``prefill``),
    ``prompt_tokens_target`` and ``wave`` and ``repeat`` (the profile's wave number and pass: the
    fit's standard errors are clustered by wave and carry the drift between passes).
    """
    if is_profile(data):
        obs = _from_profile(data)
        if obs.empty:
            raise ValueError("the profile holds no finished request of a cell that is not noisy")
        return obs.reset_index(drop=True)
    lanes = getattr(data, "lanes", None)
    levels = getattr(data, "levels", None)
    if isinstance(data, pd.DataFrame):
        lanes, levels = (data, None) if "lane" in data.columns else (None, data)
    if lanes is None and levels is None:
        raise ValueError(
            f"lanes_or_levels must be SweepResult.lanes, SweepResult.levels or a SweepResult, got {type(data).__name__}"
        )
    obs = _from_lanes(lanes, levels) if lanes is not None else _from_levels(levels)
    if obs.empty:
        raise ValueError("lanes_or_levels holds no finished lane with a TTFT or TPOT to fit")
    return obs.reset_index(drop=True)


def _require(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"lanes_or_levels ({what}) is missing the columns {missing}")


def _from_lanes(lanes: pd.DataFrame, levels: pd.DataFrame | None) -> pd.DataFrame:
    _require(lanes, ["in_flight", "lane", "ttft_ms", "tpot_ms", "prompt_tokens", "output_tokens"], "lanes")
    df = lanes
    if "outcome" in df.columns:
        df = df[df["outcome"] == "ok"]
    df = df[np.isfinite(df["prompt_tokens"].astype(float)) & (df["prompt_tokens"] >= 1)].reset_index(drop=True)
    limit = df["in_flight"].astype(float)
    lanes_per_level = lanes.groupby("in_flight")["lane"].nunique()
    batch = np.minimum(limit, df["in_flight"].map(lanes_per_level).astype(float))
    if levels is not None and "achieved_concurrency" in levels.columns:
        achieved = levels.set_index("in_flight")["achieved_concurrency"]
        batch = df["in_flight"].map(achieved).astype(float).fillna(batch)
    cached = df["cached_tokens"].astype(float) if "cached_tokens" in df.columns else 0.0 * limit
    cached = np.clip(cached.fillna(0.0), 0.0, df["prompt_tokens"] - 1)
    new = df["prompt_tokens"] - cached
    if {"start_s", "end_s"} <= set(df.columns) and df[["start_s", "end_s"]].notna().all().all():
        wave, prompts, decoding, batch = _timeline(df, new)
    else:
        first = (df["attempt"] == 1 if "attempt" in df.columns else True) & (df["lane"] < df["in_flight"])
        keys = [df[k] for k in ("in_flight", "repeat") if k in df.columns]
        wave = new.where(first, 0.0).groupby(keys).transform("sum").where(first, new)
        prompts = first.astype(float).groupby(keys).transform("sum").where(first, 1.0)
        decoding = (np.clip(batch, 1.0, limit) - 1).where(~first, 0.0)
    return _frame(
        in_flight=limit,
        batch=np.clip(batch, 1.0, limit),
        prompt=df["prompt_tokens"].astype(float),
        cached=cached,
        output=df["output_tokens"].astype(float),
        ttft=df["ttft_ms"].astype(float),
        tpot=df["tpot_ms"].astype(float),
        wave_tokens=wave,
        wave_prompts=prompts,
        decoding=decoding,
    )


def _timeline(df: pd.DataFrame, new: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From the attempts' start and end times: the uncached tokens and the prompts of each attempt's
    wave, the sequences already running when it started, and the mean number of sequences (itself
    included) running while it decoded."""
    wave, prompts, decoding, batch = np.zeros(len(df)), np.ones(len(df)), np.zeros(len(df)), np.ones(len(df))
    keys = [k for k in ("in_flight", "repeat") if k in df.columns]
    for _, group in df.groupby(keys):
        idx = group.index.to_numpy()
        start = group["start_s"].to_numpy(float)
        end = group["end_s"].to_numpy(float)
        tpot_s = np.nan_to_num(group["tpot_ms"].to_numpy(float), nan=0.0) / 1e3
        first = start + np.nan_to_num(group["ttft_ms"].to_numpy(float), nan=0.0) / 1e3
        tol = 0.5 * tpot_s  # arrivals this close land in the same engine step
        same = np.abs(start[:, None] - start[None, :]) <= tol[:, None]
        running = (start[None, :] < start[:, None] - tol[:, None]) & (end[None, :] > start[:, None])
        wave[idx] = same @ new[group.index].to_numpy(float)
        prompts[idx] = same.sum(axis=1)
        decoding[idx] = running.sum(axis=1)
        overlap = np.clip(np.minimum(end[None, :], end[:, None]) - np.maximum(start[None, :], first[:, None]), 0, None)
        span = end - first
        batch[idx] = np.where(span > 0, overlap.sum(axis=1) / np.where(span > 0, span, 1.0), 1.0)
    return wave, prompts, decoding, batch


def _from_profile(profile: pd.DataFrame) -> pd.DataFrame:
    """A profile's requests as observations: TTFT from the ``prefill`` cells (a short prefill alone:
    the long prompts of the decode cells would weigh the quadratic attention term), the step that
    prefills a ``mixed`` cell's prompt beside its decoding streams (``gap``, :func:`_mixed`; the
    prompt's TTFT is left out, as it also holds where in a step the prompt arrived, which the
    profile draws at random), the decode step from the ``decode`` and ``batch``
    cells (``batch`` sequences at ``prompt + output/2`` tokens each). The step is the request's median
    inter-token gap where recorded (its TPOT otherwise): the requests of a wave reach the server a few
    ms apart, and the steps that prefill a late one would otherwise count as decode steps of the early
    ones. Failed requests and noisy cells are left out."""
    _require(
        profile, ["cell", "batch", "prompt_tokens", "cached_tokens", "output_tokens", "ttft_ms", "tpot_ms"], "profile"
    )
    df = profile[profile["outcome"].eq("ok")] if "outcome" in profile.columns else profile
    if "noisy" in df.columns:
        df = df[~df["noisy"].astype(bool)]
    df = df[np.isfinite(df["prompt_tokens"].astype(float)) & (df["prompt_tokens"] >= 1)].reset_index(drop=True)
    decoders, decoders_context, gap = _mixed(df)
    keep = (df["cell"].ne("mixed") | decoders.notna()).to_numpy()
    df, decoders, decoders_context, gap = (
        x[keep].reset_index(drop=True) for x in (df, decoders, decoders_context, gap)
    )
    single = df["cell"].eq("prefill").to_numpy()  # a mixed prompt's TTFT also holds its arrival's phase
    decoding = df["cell"].isin(["decode", "batch"]).to_numpy()
    cached = np.clip(df["cached_tokens"].astype(float).fillna(0.0), 0.0, df["prompt_tokens"] - 1)
    batch = df["batch"].astype(float)  # a mixed cell's: its streams (the cell's label; no TPOT is taken from it)
    return _frame(
        in_flight=batch,
        batch=batch,
        prompt=df["prompt_tokens"].astype(float),
        cached=cached,
        output=np.where(decoding, df["output_tokens"].astype(float), 1.0),  # no TPOT from a prefill cell
        ttft=np.where(single, df["ttft_ms"].astype(float), np.nan),
        tpot=(df["itl_ms_p50"] if "itl_ms_p50" in df.columns else df["tpot_ms"]).astype(float).fillna(df["tpot_ms"]),
        wave_tokens=df["prompt_tokens"].astype(float) - cached,
        wave_prompts=np.ones(len(df)),
        decoding=decoders.fillna(0.0).to_numpy(float),
        decoding_context=decoders_context.to_numpy(float),
        gap=gap.to_numpy(float),
        labels={
            "cell": df["cell"],
            "prompt_tokens_target": df.get("prompt_tokens_target", df["prompt_tokens"]),
            **({"wave": df["wave"]} if "wave" in df.columns else {}),
            **({"repeat": df["repeat"]} if "repeat" in df.columns else {}),
        },
    )


def _mixed(df: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """For the prompt of each ``mixed`` wave: the streams decoding when it was sent (their first token
    came before it, their last after), their mean context then (prompt plus the tokens generated by
    then, one per median gap after the first) and the median of their longest inter-token gaps (the
    step that prefilled the prompt beside them; NaN unless every one of them outlived the prompt's
    first token); NaN for every other row, and for a prompt sent while a stream of its wave still
    waited for its first token (it then joined that prefill, not decodes). The streams' own rows are
    left out of the fit: their median gap is a batch cell's."""
    count, context, gap = (pd.Series(np.nan, index=df.index) for _ in range(3))
    if not {"role", "sent_s", "wave", "itl_ms_max"} <= set(df.columns):
        return count, context, gap
    for _, wave in df[df["cell"].eq("mixed")].groupby("wave"):
        prompt, streams = wave[wave["role"].eq("prompt")], wave[wave["role"].eq("stream")]
        if len(prompt) != 1 or streams.empty:
            continue
        sent = float(prompt["sent_s"].iloc[0])
        first = streams["sent_s"] + streams["ttft_ms"] / 1e3
        end = streams["sent_s"] + streams["e2e_ms"] / 1e3
        if not (first < sent).all():
            continue
        running = end > sent
        longest = float(streams["itl_ms_max"].median())
        first_token = sent + float(prompt["ttft_ms"].iloc[0]) / 1e3
        whole = running.any() and (end > first_token).all() and np.isfinite(longest)
        # the prompt's step began one longest gap before its first token; the streams had then
        # generated a token per median gap since their first
        began = first_token - longest / 1e3 if whole else sent
        gap_s = streams["itl_ms_p50"].fillna(streams["tpot_ms"]) / 1e3
        held = streams["prompt_tokens"] + 1 + np.round((began - first) / gap_s)
        count[prompt.index[0]] = float(running.sum())
        context[prompt.index[0]] = float(held[running].mean()) if running.any() else 0.0
        gap[prompt.index[0]] = longest if whole else np.nan
    return count, context, gap


def _from_levels(levels: pd.DataFrame) -> pd.DataFrame:
    _require(
        levels,
        ["in_flight", "lanes", "prompt_tokens", "output_tokens", "achieved_concurrency", "ttft_p50_ms", "tpot_p50_ms"],
        "levels",
    )
    limit = levels["in_flight"].astype(float)
    lanes = levels["lanes_ok"] if "lanes_ok" in levels.columns else levels["lanes"]
    lanes = lanes.astype(float).clip(lower=1)
    prompt = levels["prompt_tokens"].astype(float) / lanes
    together = np.minimum(limit, levels["lanes"].astype(float))  # the first wave of the closed loop
    first = together / levels["lanes"].astype(float) > 0.5
    batch = np.clip(levels["achieved_concurrency"].astype(float).fillna(1.0), 1.0, limit)
    hit = pd.Series(0.0, index=levels.index)
    for column in ("provider_cached_rate", "prefix_hit_rate"):  # the server's own counter wins
        if column in levels.columns:
            hit = levels[column].astype(float).where(lambda s: np.isfinite(s), hit)
    return _frame(
        in_flight=limit,
        batch=batch,
        prompt=prompt,
        cached=(prompt * hit.clip(0, 1)).fillna(0.0),
        output=levels["output_tokens"].astype(float) / lanes,
        ttft=levels["ttft_p50_ms"].astype(float),
        tpot=levels["tpot_p50_ms"].astype(float),
        # the median lane is in the first wave when that wave is most of the level
        wave_tokens=np.where(first, together, 1.0) * prompt * (1 - hit.clip(0, 1)),
        wave_prompts=np.where(first, together, 1.0),
        decoding=np.where(first, 0.0, batch - 1),
    )


def _frame(
    in_flight, batch, prompt, cached, output, ttft, tpot, wave_tokens, wave_prompts, decoding, labels=None,
    decoding_context=None, gap=None,
) -> pd.DataFrame:  # fmt: skip
    prompt = np.maximum(np.asarray(prompt, float), 1.0)
    cached = np.clip(np.asarray(cached, float), 0.0, prompt)
    output = np.asarray(output, float)
    base = {
        **{name: np.asarray(values) for name, values in (labels or {}).items()},
        "in_flight": np.asarray(in_flight, float),
        "batch": np.asarray(batch, float),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "context_tokens": (context := prompt + np.nan_to_num(output, nan=1.0) / 2),
        # tokens each of the ``decoding`` sequences holds: a sweep's lanes are alike, a mixed cell's not
        "decoding_context_tokens": context
        if decoding_context is None
        else np.where(np.isfinite(decoding_context), decoding_context, context),
        "wave_tokens": np.maximum(np.asarray(wave_tokens, float), 1.0),
        "wave_prompts": np.maximum(np.asarray(wave_prompts, float), 1.0),
        "decoding": np.asarray(decoding, float),
    }
    ttft_rows = pd.DataFrame({"kind": "ttft", **base, "measured_ms": np.asarray(ttft, float)})
    tpot_rows = pd.DataFrame({"kind": "tpot", **base, "measured_ms": np.asarray(tpot, float)})
    tpot_rows = tpot_rows[output >= 2]
    gap_rows = pd.DataFrame(
        {"kind": "gap", **base, "measured_ms": np.full(len(prompt), np.nan) if gap is None else gap}
    )
    both = pd.concat([ttft_rows, tpot_rows, gap_rows], ignore_index=True)
    ok = np.isfinite(both["measured_ms"]) & (both["measured_ms"] > 0)
    return both[ok]
