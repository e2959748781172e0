"""Disaggregated prefill/decode (xPyD) in the simulator: a prefill pool, the KV transfer, a decode pool.

The rules, each from an engine's or a paper's own text:

* A prefill instance "performs only the prefill computation for this request to generate the first output
  token. It then sends the intermediate results (mainly KV caches) to a decoding instance" (DistServe, arXiv
  2401.09670 section 2.3). So the prefill pool is simulated as its own engine, FCFS and iteration by
  iteration like any replica here, on the requests with one output token each: a request's TTFT is that
  pool's TTFT (its queue plus its prefill), nothing from the decode pool. (vLLM's example P/D proxies also
  send each request to a prefill instance with ``max_tokens=1`` first, but stream the client the decode
  instance's tokens, so there the first token also waits for the transfer and one decode step.)
* The KV then moves to a decode replica: :func:`toolkit.kv_transfer_ms`, counted after the prefill ends.
* The decode pool admits a request once its KV has arrived and its memory and batch limit allow (DistServe
  section 4.3: a decoding instance fetches the KV "once it has sufficient memory", the prefill GPU holding
  it meanwhile). It is simulated as a second engine on requests arriving at that time, whose prompt (the
  prompt plus the first token) is all in cache but the first token, which the first step feeds in; they
  emit the remaining ``output_tokens - 1`` tokens. TPOT comes from this pool only.

Each pool has its own GPU, tensor-parallel degree and batch limit; the prompt's KV, whole, lands in the
decode pool's cache. Speculative decoding (``speculation``) runs in the decode pool only: the prefill pool
emits one token per request.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from toolkit._args import check_int
from toolkit._model.cost import CostModel
from toolkit._model.kv_transfer import link_figures, transfer_ms
from toolkit._queueing.sim_result import SimulationResult, summarize
from toolkit._queueing.workload import _cost, _load

__all__ = ["Disaggregation"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Disaggregation:
    """An xPyD deployment: ``prefill_replicas`` prefill and ``decode_replicas`` decode replicas.

    Give it (or a dict of its fields) as ``simulate(..., disaggregation=...)``. The per-pool fields left None
    take the simulation's own ``gpu``, ``tensor_parallel`` and ``max_batch``.

    Parameters
    ----------
    prefill_replicas, decode_replicas : int
        Replicas of each pool (1 to 10**4).
    link : {"nvlink", "infiniband", "pcie"}
        The link the KV cache crosses (:func:`toolkit.kv_links`).
    link_gb_s, link_latency_us, link_efficiency : float, optional
        Replace the link's figures (as for :func:`toolkit.kv_transfer_ms`; ``math.inf`` GB/s with 0 us is
        a free link).
    prefill_gpu, decode_gpu : str or spec, optional
        Each pool's GPU.
    prefill_tensor_parallel, decode_tensor_parallel : int, optional
        GPUs per replica of each pool.
    prefill_max_batch, decode_max_batch : int, optional
        Most sequences running at once per replica of each pool.
    """

    prefill_replicas: int
    decode_replicas: int
    link: str = "nvlink"
    link_gb_s: float | None = None
    link_latency_us: float | None = None
    link_efficiency: float | None = None
    prefill_gpu: object = None
    decode_gpu: object = None
    prefill_tensor_parallel: int | None = None
    decode_tensor_parallel: int | None = None
    prefill_max_batch: int | None = None
    decode_max_batch: int | None = None

    @property
    def layout(self) -> str:
        """``"xPyD"``, e.g. ``"2P1D"``."""
        return f"{self.prefill_replicas}P{self.decode_replicas}D"


def as_disaggregation(value: object) -> Disaggregation:
    """A :class:`Disaggregation` from one or from a dict of its fields (``ValueError`` naming the bad field)."""
    if isinstance(value, dict):
        fields = [f.name for f in dataclasses.fields(Disaggregation)]
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise ValueError(f"disaggregation has unknown fields {unknown}; allowed: {', '.join(fields)}")
        missing = [f for f in ("prefill_replicas", "decode_replicas") if f not in value]
        if missing:
            raise ValueError(f"disaggregation needs {' and '.join(missing)} (each 1 to 10**4)")
        value = Disaggregation(**value)
    if not isinstance(value, Disaggregation):
        raise ValueError(f"disaggregation must be a Disaggregation, a dict of its fields or None; got {value!r}")
    for name in ("prefill_replicas", "decode_replicas"):
        check_int(f"disaggregation {name}", getattr(value, name), low=1, high=10**4)
    for name in ("prefill_tensor_parallel", "decode_tensor_parallel"):
        if getattr(value, name) is not None:
            check_int(f"disaggregation {name}", getattr(value, name), low=1, high=64)
    for name in ("prefill_max_batch", "decode_max_batch"):
        if getattr(value, name) is not None:
            check_int(f"disaggregation {name}", getattr(value, name), low=1, high=10**6)
    return value


class _Handed:
    """A cost object whose requests pay no request overhead: the decode pool receives them from the prefill
    pool, which paid it."""

    request_overhead_ms = 0.0

    def __init__(self, cost: object):
        self._cost = cost

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cost, name)


def _handed(cost: object) -> object:
    if isinstance(cost, CostModel):  # keeps the simulator's fast path for the one cost model
        return dataclasses.replace(cost, request_overhead_ms=0.0)
    return _Handed(cost)


def _pool_cost(args: dict, gpu: object, tp: int) -> object:
    a = args
    return _cost(a["cost"], a["model"], gpu, a["quant"], tp, a["kv_dtype"], a["calibration"], a["backend"], a["budget"])


def simulate_disaggregated(simulate: Any, args: dict[str, Any]) -> SimulationResult:
    """``simulate``'s result for ``args`` (its keyword arguments) with ``args["disaggregation"]`` set."""
    d = as_disaggregation(args["disaggregation"])
    if args["concurrency"] is not None:
        raise ValueError("disaggregation needs an open loop (arrival_rate or trace), not concurrency")
    a = dict(args, budget=check_int("max_num_batched_tokens", args["max_num_batched_tokens"], low=1))
    rng = np.random.default_rng(check_int("seed", args["seed"], low=0))
    arrival, prompt, output = _load(
        rng, a["prompt_tokens"], a["output_tokens"], a["num_requests"], a["arrival_rate"], None, a["arrivals"],
        a["ca2"], a["trace"]
    )  # fmt: skip
    order = np.argsort(arrival, kind="stable")  # simulate numbers requests in sending order
    arrival, prompt, output = arrival[order], prompt[order], output[order]
    trace = a["trace"]
    if trace is None:
        first = pd.DataFrame({"arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": 1})
    else:
        first = trace.assign(output_tokens=1)
    tp = a["tensor_parallel"]
    cost_p = _pool_cost(a, d.prefill_gpu or a["gpu"], d.prefill_tensor_parallel or tp)
    cost_d = _pool_cost(a, d.decode_gpu or a["gpu"], d.decode_tensor_parallel or tp)
    gpu = getattr(cost_p, "gpu", {"name": "the cost object's GPU"})
    figures = link_figures(
        d.link, gpu, link_gb_s=d.link_gb_s, latency_us=d.link_latency_us, efficiency=d.link_efficiency
    )
    if not hasattr(cost_p, "kv_bytes_per_token"):
        raise ValueError("cost must provide kv_bytes_per_token (bytes per token per GPU) with disaggregation")
    shared = {k: a[k] for k in ("max_num_batched_tokens", "seed", "warmup_fraction", "backend", "progress")}
    shared.update(calibration=a["calibration"], kv_dtype=a["kv_dtype"])
    pre = simulate(
        cost=cost_p, trace=first, replicas=d.prefill_replicas, max_batch=d.prefill_max_batch or a["max_batch"],
        routing=a["routing"], prefill_breaks=a["prefill_breaks"], prefill_start_breaks=a["prefill_start_breaks"],
        slot_prompt_similarity=a["slot_prompt_similarity"], prompt_cache_mib=a["prompt_cache_mib"], **shared,
    )  # fmt: skip
    p = pre.requests
    transfer_s = transfer_ms(prompt, float(cost_p.kv_bytes_per_token), figures) / 1e3
    first_s = arrival + p["ttft_s"].to_numpy()
    ready = first_s + transfer_s
    finish = first_s.copy()
    decode_wait = np.full(prompt.size, np.nan)
    replica = np.full(prompt.size, -1, dtype=np.int64)
    preempted = p["preempted"].to_numpy().copy()
    dec = None
    rest = np.flatnonzero(output > 1)
    if rest.size:
        later = rest[np.argsort(ready[rest], kind="stable")]  # the decode pool's sending order
        second = pd.DataFrame(
            {
                "arrival_s": ready[later],
                "prompt_tokens": prompt[later] + 1,
                "output_tokens": output[later] - 1,
                "cached_tokens": prompt[later],
            }
        )
        dec = simulate(
            cost=_handed(cost_d), trace=second, replicas=d.decode_replicas,
            max_batch=d.decode_max_batch or a["max_batch"],
            routing="least_loaded" if a["routing"] == "prefix_affinity" else a["routing"],
            speculation=a.get("speculation"), **shared,
        )  # fmt: skip
        r = dec.requests
        finish[later] = ready[later] + r["e2e_s"].to_numpy()
        decode_wait[later] = r["queue_wait_s"].to_numpy()
        replica[later] = r["replica"].to_numpy()
        preempted[later] += r["preempted"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (finish - first_s) / (output - 1), np.nan)
    requests = p.assign(
        tpot_s=tpot,
        e2e_s=finish - arrival,
        output_tokens=output,
        replica=replica,
        preempted=preempted,
        prefill_replica=p["replica"],
        transfer_s=transfer_s,
        decode_wait_s=decode_wait,
    )
    return _result(requests, pre, dec, d)


def _result(requests: pd.DataFrame, pre: SimulationResult, dec: SimulationResult | None, d: Disaggregation):
    """The combined result: the summary of the whole requests, each pool's utilisation and stability."""
    pools = [pre] if dec is None else [pre, dec]
    sums = [pool.summary.iloc[0] for pool in pools]
    # summarize reads an engine only for its loop kind and busy time; the pools' utilisations replace that below
    engine = SimpleNamespace(closed_loop=False, reps=[], busy_at_window=[], window_start=0.0)
    kv_budget = int(sums[-1]["kv_budget_tokens"])
    summary = summarize(requests, engine, math.nan, 0, kv_budget)
    weights = (d.prefill_replicas, d.decode_replicas)
    util = [float(s["utilization"]) for s in sums]
    summary.update(
        prefill_utilization=util[0],
        decode_utilization=util[1] if dec is not None else 0.0,
        utilization=float(np.dot(util, weights[: len(util)]) / sum(weights)),
        queue_wait_growth=max(
            (float(s["queue_wait_growth"]) for s in sums), key=lambda g: -math.inf if math.isnan(g) else g
        ),
        stable=None if any(s["stable"] is None for s in sums) else all(bool(s["stable"]) for s in sums),
        transfer_mean_s=float(requests["transfer_s"].mean()),
    )
    config = dict(pre.config, disaggregation=dataclasses.asdict(d), layout=d.layout)
    config.update(prefill=pre.config, decode=None if dec is None else dec.config)
    return SimulationResult(requests, pd.DataFrame([summary]), config)
