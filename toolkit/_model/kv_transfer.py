"""The KV-cache transfer of a disaggregated deployment: prefill replicas hand each prompt's KV to a decode replica.

A prefill instance "performs only the prefill computation for this request to generate the first output token.
It then sends the intermediate results (mainly KV caches) to a decoding instance" (DistServe, Zhong et al.,
OSDI'24, arXiv 2401.09670 section 2.3). The time of that hand-off, per prompt::

    transfer_ms = prompt_tokens x kv_bytes_per_token / (link_gb_s x efficiency) + latency

``kv_bytes_per_token`` is per GPU (the model's KV over the tensor-parallel degree): each rank sends its own
shard over its own link at once, as DistServe places the matching stages of a prefill and a decoding instance
on one node (section 4.2) and vLLM's NIXL connector moves the blocks rank to rank. The link figures are in
``toolkit/_data/kv_links.csv``, each with its source: NVLink takes the GPU catalog's ``interconnect_gb_s``, on a
GPU whose figure is NVLink-class (``nvlink_min_gb_s`` in efficiency.csv, as the all-reduce term decides).
The transfer is counted whole after the prefill (Splitwise, arXiv 2311.18677 section IV-C, calls this the
serialized transfer; its layer-wise transfer hides most of it under the prefill, so this errs high).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit._args import check_array, check_choice, check_int, check_number
from toolkit._data import load_csv, load_rows
from toolkit._model.memory import efficiency_value, kv_bytes_per_token
from toolkit._model.resolve import resolve_gpu

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["kv_links", "kv_transfer_ms"]


def kv_links() -> pd.DataFrame:
    """Return the catalog of links a KV cache travels over from a prefill to a decode replica.

    Parameters
    ----------
    None

    Returns
    -------
    pandas.DataFrame
        One row per link kind: ``link`` (``nvlink``, ``infiniband``, ``pcie``), ``bandwidth_gb_s`` (per GPU,
        one direction; NaN for ``nvlink``, which takes the GPU's ``interconnect_gb_s``), ``latency_us`` (per
        transfer), ``efficiency`` (share of the line rate a transfer reaches), ``source``.
    """
    return load_csv("kv_links.csv")


def link_figures(
    link: str, gpu: dict[str, Any], *, link_gb_s: float | None, latency_us: float | None, efficiency: float | None
) -> tuple[float, float, float]:
    """(GB/s, us, efficiency) of ``link`` from a GPU spec, each replaced where given. ``link_gb_s`` may be
    ``math.inf`` (an ideal link: the bytes cost nothing)."""
    rows = {row["link"]: row for row in load_rows("kv_links.csv")}
    check_choice("link", link, tuple(rows))
    row = rows[link]
    lat = row["latency_us"] if latency_us is None else check_number("link_latency_us", latency_us, low=0)
    eff = row["efficiency"] if efficiency is None else efficiency
    eff = check_number("link_efficiency", eff, low=0, high=1, low_inclusive=False)
    if link_gb_s is None:
        link_gb_s = float(gpu.get("interconnect_gb_s", math.nan)) if link == "nvlink" else row["bandwidth_gb_s"]
        if not link_gb_s >= (efficiency_value("nvlink_min_gb_s") if link == "nvlink" else 0):
            raise ValueError(
                f"link='nvlink' needs an NVLink-class GPU (interconnect_gb_s >= nvlink_min_gb_s); {gpu['name']!r} "
                "has none: give link='pcie' or 'infiniband', or link_gb_s"
            )
    elif link_gb_s != math.inf:
        link_gb_s = check_number("link_gb_s", link_gb_s, low=0, low_inclusive=False)
    return float(link_gb_s), float(lat), eff


def transfer_ms(tokens: np.ndarray, bytes_per_token: float, figures: tuple[float, float, float]) -> np.ndarray:
    """Milliseconds to move ``tokens`` tokens of KV at ``bytes_per_token`` (per GPU) over a link's figures."""
    gb_s, latency_us, efficiency = figures
    return np.asarray(tokens, dtype=float) * bytes_per_token / (gb_s * efficiency * 1e6) + latency_us / 1e3


def kv_transfer_ms(
    model: object,
    prompt_tokens: object,
    *,
    gpu: object = "H100 SXM",
    link: str = "nvlink",
    tensor_parallel: int = 1,
    kv_dtype: object = "fp16",
    link_gb_s: float | None = None,
    link_latency_us: float | None = None,
    link_efficiency: float | None = None,
) -> float | np.ndarray:
    """Time to move a prompt's KV cache from a prefill replica to a decode replica, in ms.

    ``prompt_tokens x kv_bytes_per_token / tensor_parallel / (link_gb_s x link_efficiency) + link_latency_us``:
    each of the ``tensor_parallel`` ranks sends its shard over its own link at once (module docstring).

    Parameters
    ----------
    model : str or spec
        Catalog name or architecture spec (its KV bytes per token, :func:`toolkit.kv_bytes_per_token`).
    prompt_tokens : int or array-like
        Tokens whose KV moves (>= 1).
    gpu : str or spec
        The GPU whose ``interconnect_gb_s`` an ``nvlink`` link runs at.
    link : {"nvlink", "infiniband", "pcie"}
        Link kind (:func:`toolkit.kv_links`).
    tensor_parallel : int
        GPUs per replica (1 to 64), each moving its share of the KV.
    kv_dtype : str or spec
        KV-cache format.
    link_gb_s, link_latency_us, link_efficiency : float, optional
        Replace the link's bandwidth (GB/s per GPU, > 0; ``math.inf`` for an ideal link), fixed latency
        (us, >= 0) and efficiency (0 to 1).

    Returns
    -------
    float or numpy.ndarray
        Milliseconds per prompt; a float for a scalar ``prompt_tokens``.
    """
    tokens = check_array("prompt_tokens", prompt_tokens, low=1)
    tp = check_int("tensor_parallel", tensor_parallel, low=1, high=64)
    figures = link_figures(
        link, resolve_gpu(gpu), link_gb_s=link_gb_s, latency_us=link_latency_us, efficiency=link_efficiency
    )
    ms = transfer_ms(tokens, float(kv_bytes_per_token(model, kv_dtype)) / tp, figures)
    return float(ms.reshape(-1)[0]) if np.ndim(prompt_tokens) == 0 else ms
