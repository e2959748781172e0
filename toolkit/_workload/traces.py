"""Loading a request trace: the shipped Azure 2023 and Mooncake hours or any CSV/Parquet/JSONL file, sliced and scaled.

A trace frame has one row per request: ``arrival_s`` (seconds from the start of the window),
``prompt_tokens`` and ``output_tokens`` (integers >= 1), plus any other columns of the file. It is
what :func:`toolkit.simulate` replays with ``trace=``.

The shipped traces are the two one-hour samples of the Azure LLM inference dataset 2023 (a
conversation service and a code-completion service; the collection date is in the traces' README),
published with the
Splitwise paper (Patel et al., ISCA 2024) under CC-BY 4.0; ``toolkit/_data/traces/README.md`` holds
the citation and the licence sits beside it. The two Mooncake traces (Qin et al., FAST 2025; Apache
2.0, ``toolkit/_data/traces/mooncake/``) carry each prompt's prefix blocks as well
(:mod:`toolkit._workload.prefix`).
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit._args import check_int, check_number
from toolkit._data import data_file
from toolkit._files import read_user_bytes
from toolkit._queueing.workload import MAX_REQUESTS, token_counts
from toolkit._vocab.keywords import positional_deprecated
from toolkit._workload.blocks import read_mooncake, reblock, scale_blocks
from toolkit._workload.prefix import ATTR, prefix_blocks_of

__all__ = ["load_trace"]

SHIPPED = {
    "azure-conv-2023": "traces/AzureLLMInferenceTrace_conv.csv",
    "azure-code-2023": "traces/AzureLLMInferenceTrace_code.csv",
    "mooncake-conversation": "traces/mooncake/conversation_trace.jsonl",
    "mooncake-synthetic": "traces/mooncake/synthetic_trace.jsonl",
}
# the Azure dataset's column names, accepted as they are
AZURE_COLUMNS = {"TIMESTAMP": "arrival_s", "ContextTokens": "prompt_tokens", "GeneratedTokens": "output_tokens"}
COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
# A trace file is read whole into memory: a larger file is refused before it is read.
MAX_TRACE_BYTES = 2**30
SOURCE = (
    "Azure LLM inference trace 2023 (Azure Public Dataset), published with Patel et al., 'Splitwise: "
    "Efficient generative LLM inference using phase splitting', ISCA 2024; CC-BY 4.0"
)
MOONCAKE_SOURCE = (
    "Mooncake trace (Kimi), published with Qin et al., 'Mooncake: Trading More Storage for Less "
    "Computation - A KVCache-centric Architecture for Serving LLM Chatbot', FAST 2025; Apache-2.0"
)


@positional_deprecated
def load_trace(
    name_or_path: str | Path,
    *,
    start_s: float | None = None,
    duration_s: float | None = None,
    time_scale: float = 1.0,
    rate_scale: float | None = None,
    seed: int = 0,
    token_scale: float = 1.0,
    prefix_block_tokens: int | None = None,
) -> pd.DataFrame:
    """Load a request trace as a tidy frame, optionally sliced, stretched and thinned or multiplied.

    Parameters
    ----------
    name_or_path : str or pathlib.Path
        A shipped trace (``"azure-conv-2023"``, ``"azure-code-2023"``, ``"mooncake-conversation"``,
        ``"mooncake-synthetic"``), a Mooncake JSONL file (``.jsonl``: ``timestamp`` in ms,
        ``input_length``, ``output_length``, ``hash_ids`` of 512-token blocks) or a CSV/Parquet file (a
        regular file of at most 1 GiB; Parquet needs ``pyarrow``: ``pip install pyarrow``) with
        ``arrival_s``, ``prompt_tokens`` and ``output_tokens`` columns, or with the Azure names
        ``TIMESTAMP`` (date-times; mixed UTC offsets, as across a daylight-saving change, are
        compared in UTC), ``ContextTokens`` and ``GeneratedTokens`` (a file with both names of one
        column is refused).
    start_s, duration_s : float, optional
        The window kept, in seconds of the original trace from its first request (>= 0; default
        the whole trace). ``arrival_s`` then counts from the window's start.
    time_scale : float
        Factor on every time (> 0, at most 1e6): 2 stretches the trace to half its rate, 0.5
        compresses it to twice its rate. Applied after slicing.
    rate_scale : float, optional
        Factor on the mean rate without changing the time axis (> 0, at most 1000, and at most
        10**7 requests in the result, the simulator's cap): below 1 each
        request is kept with probability ``rate_scale`` (thinning); above 1 the trace is
        superposed with ``floor(rate_scale) - 1`` copies, each shifted circularly by a random offset,
        plus a thinned copy for the fraction. Seeded by ``seed``. A copied request keeps its prefix
        blocks: it shares them with its original, as a repeat of the same prompt would.
    seed : int
        Seed of the thinning and the shifts (0 to 2**63 - 1).
    token_scale : float
        Factor on ``prompt_tokens`` and ``output_tokens`` (> 0, at most 1e6), each rounded and at
        least 1, and at most 10**9 after scaling: fits a production trace's lengths to a small test
        server. Prefix blocks scale along: a block becomes ``round(block * token_scale)`` tokens
        (at least 1), each request keeps its blocks, and a prompt that rounding moved out of the
        range its blocks cover is moved back into it.
    prefix_block_tokens : int, optional
        Re-cut a trace with prefix blocks into blocks of this many tokens (1 to 2**20), after
        ``token_scale``: to a paged engine's block size (vLLM's default is 16).

    Returns
    -------
    pandas.DataFrame
        Sorted by ``arrival_s`` (s, from the window's start), with ``prompt_tokens`` and
        ``output_tokens`` (int64) first, then the file's other columns. ``attrs`` records
        ``source``, ``name``, ``window_s`` (the window's length after ``time_scale``) and
        ``rate_scaling`` (``"none"``, ``"thinned"`` or ``"superposed"``). A Mooncake trace also has
        ``prefix_blocks`` (per request a tuple of block ids, chain hashes: equal first k ids, equal
        first k blocks) and ``attrs["prefix_block_tokens"]``, the tokens per block.
    """
    frame, name, source = _read(name_or_path)
    block = frame.attrs.get(ATTR)
    if prefix_block_tokens is not None and block is None:
        raise ValueError(f"prefix_block_tokens: {name} has no prefix blocks (a Mooncake JSONL trace has)")
    span = float(frame["arrival_s"].max()) if len(frame) else 0.0
    start = 0.0 if start_s is None else check_number("start_s", start_s, low=0, high=1e9)
    length = (
        span - start
        if duration_s is None
        else check_number("duration_s", duration_s, low=0, low_inclusive=False, high=1e9)
    )
    scale = check_number("time_scale", time_scale, low=0, low_inclusive=False, high=1e6)
    in_window = (frame["arrival_s"] >= start) & (
        frame["arrival_s"] < start + length if duration_s is not None else True
    )
    frame = frame.loc[in_window].copy()
    frame["arrival_s"] = (frame["arrival_s"] - start) * scale
    window_s = max(length, 0.0) * scale
    rng = np.random.default_rng(check_int("seed", seed, low=0, high=2**63 - 1))
    method = "none"
    if rate_scale is not None:
        factor = check_number("rate_scale", rate_scale, low=0, low_inclusive=False, high=1000)
        if len(frame) * factor > MAX_REQUESTS:
            raise ValueError(
                f"rate_scale={factor:g} would make about {len(frame) * factor:.3g} requests from {name}'s "
                f"{len(frame)}; at most {MAX_REQUESTS:.0e} (the simulator's cap)"
            )
        frame, method = _rescale(frame, factor, window_s, rng)
    tokens = check_number("token_scale", token_scale, low=0, low_inclusive=False, high=1e6)
    if tokens != 1.0:
        for column in ("prompt_tokens", "output_tokens"):
            scaled = np.maximum(1, np.rint(frame[column].to_numpy(dtype=float) * tokens))
            frame[column] = token_counts(f"{column} x token_scale={tokens:g}", scaled)
    frame = frame.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    frame.attrs.update(source=source, name=name, window_s=window_s, rate_scaling=method, token_scale=tokens)
    if block is not None:
        frame.attrs[ATTR] = block
        if tokens != 1.0:
            frame = scale_blocks(frame, token_scale=tokens)
        if prefix_block_tokens is not None:
            frame = reblock(frame, block_tokens=prefix_block_tokens)
    return frame


def _read(name_or_path: str | Path) -> tuple[pd.DataFrame, str, str]:
    if isinstance(name_or_path, str) and name_or_path in SHIPPED:
        if SHIPPED[name_or_path].endswith(".jsonl"):
            return (
                _blocks(read_mooncake(data_file(SHIPPED[name_or_path]).read_bytes(), name=name_or_path)),
                name_or_path,
                MOONCAKE_SOURCE,
            )
        with data_file(SHIPPED[name_or_path]).open("rb") as handle:
            raw = pd.read_csv(handle)
        return _tidy(raw), name_or_path, SOURCE
    if not isinstance(name_or_path, (str, Path)):
        raise ValueError(
            f"name_or_path must be one of {', '.join(SHIPPED)} or a file path, got {type(name_or_path).__name__}"
        )
    path = Path(name_or_path)
    if not path.exists():
        raise ValueError(
            f"name_or_path: no shipped trace or file named {str(name_or_path)!r} (shipped: {', '.join(SHIPPED)})"
        )
    raw_bytes = read_user_bytes("name_or_path", path, max_bytes=MAX_TRACE_BYTES)
    if path.suffix.lower() == ".jsonl":
        return _blocks(read_mooncake(raw_bytes, name=str(path))), path.name, str(path)
    data = io.BytesIO(raw_bytes)
    parquet = path.suffix.lower() in (".parquet", ".pq")
    if parquet and not any(importlib.util.find_spec(engine) for engine in ("pyarrow", "fastparquet")):
        raise ValueError(f"name_or_path: reading the Parquet file {path} needs pyarrow: pip install pyarrow")
    try:
        raw = pd.read_parquet(data) if parquet else pd.read_csv(data, comment="#")
        return _tidy(raw), path.name, str(path)
    except (ValueError, TypeError, OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"trace file {path}: {exc}") from None


def _blocks(raw: pd.DataFrame) -> pd.DataFrame:
    """A frame read with prefix blocks, tidied, its blocks checked against its prompts."""
    frame = _tidy(raw)
    frame.attrs[ATTR] = raw.attrs[ATTR]
    prefix_blocks_of(frame)
    return frame


def _tidy(raw: pd.DataFrame) -> pd.DataFrame:
    both = [(azure, ours) for azure, ours in AZURE_COLUMNS.items() if azure in raw.columns and ours in raw.columns]
    if both:
        raise ValueError(f"columns {both[0][0]} and {both[0][1]} both give {both[0][1]}: keep one of them")
    raw = raw.rename(columns=AZURE_COLUMNS)
    missing = [c for c in COLUMNS if c not in raw.columns]
    if missing:
        raise ValueError(f"trace is missing columns {missing}; it needs {list(COLUMNS)} (or the Azure names)")
    arrival = raw["arrival_s"]
    if not pd.api.types.is_numeric_dtype(arrival):
        # in UTC: a trace that crosses a daylight-saving change carries two offsets
        stamps = pd.to_datetime(arrival, errors="coerce", utc=True)
        if stamps.isna().any():
            raise ValueError("trace arrival_s (or TIMESTAMP) must be seconds or date-times in every row")
        arrival = (stamps - stamps.min()).dt.total_seconds()
    arrival = arrival.to_numpy(dtype=float)
    if not np.all(np.isfinite(arrival)):
        raise ValueError("trace arrival_s must be finite in every row")
    out = raw.copy()
    out["arrival_s"] = arrival - (arrival.min() if len(arrival) else 0.0)
    for col in ("prompt_tokens", "output_tokens"):
        out[col] = token_counts(f"trace {col}", pd.to_numeric(out[col], errors="coerce").to_numpy(dtype=float))
    return out[[*COLUMNS, *(c for c in out.columns if c not in COLUMNS)]]


def _rescale(frame: pd.DataFrame, factor: float, window_s: float, rng: np.random.Generator) -> tuple[pd.DataFrame, str]:
    whole, fraction = int(factor), factor - int(factor)
    parts = [frame] if whole >= 1 else []
    for _ in range(max(whole - 1, 0)):
        shifted = frame.copy()
        offset = rng.uniform(0, window_s) if window_s > 0 else 0.0
        shifted["arrival_s"] = (shifted["arrival_s"] + offset) % window_s if window_s > 0 else shifted["arrival_s"]
        parts.append(shifted)
    if fraction > 0:
        thinned = frame.loc[rng.random(len(frame)) < fraction].copy()
        if whole >= 1 and window_s > 0:
            thinned["arrival_s"] = (thinned["arrival_s"] + rng.uniform(0, window_s)) % window_s
        parts.append(thinned)
    out = pd.concat(parts, ignore_index=True) if parts else frame.iloc[0:0].copy()
    return out, "thinned" if factor < 1 else "superposed" if factor > 1 else "none"
