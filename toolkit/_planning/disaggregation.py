"""Disaggregated (xPyD) fleets in the planner: for each configuration, the cheapest prefill and decode pools.

``plan(..., layouts=("aggregated", "disaggregated"))`` adds, per model x GPU x format x backend x tensor-parallel
configuration of the aggregated table, one row of the same configuration split into ``x`` prefill and ``y``
decode replicas (the ratio DistServe searches, arXiv 2401.09670 section 4.1: each phase scaled to its own SLO,
then replicated to the rate). The closed forms, from the quantities :func:`toolkit.plan` already uses:

* Prefill pool: each replica prefills one prompt at a time, a service of ``CostModel.ttft_ms(prompt)`` minus
  the request overhead; round robin spreads the Poisson stream, Erlang gaps with ``ca2 = 1 / x``; prompts of one
  length give ``cs2 = 0`` (DistServe models a prefill instance as an M/D/1 queue, section 3.1). ``ttft_ms`` =
  the :func:`toolkit.queue_wait` percentile wait + ``ttft_ms(prompt)``. ``x`` is the fewest replicas that
  meet the TTFT SLO.
* Decode pool: a replica holds ``m`` sequences, ``m = lambda / y x (output - 1) x step(m)`` (Little's law)
  solved by fixed-point iteration from ``m = batch``; the percentile batch is ``1 +`` the Poisson percentile of
  ``m``, capped at ``batch`` (the largest of the configuration's aggregated batch grid: its KV and backend
  cap); ``tpot_ms`` = that batch's decode step plus the KV transfer spread over the ``output - 1`` later
  tokens (:func:`toolkit.kv_transfer_ms`: over NVLink, or PCIe on a GPU without it), as the simulator counts it. ``y`` is the fewest
  replicas that keep ``m < batch`` and meet the TPOT and end-to-end SLOs.
* ``e2e`` = ``ttft_ms`` + transfer + ``q x (output - 1) x`` step, ``q`` the aggregated rows' length factor.
* Cost: the configuration's GPU price x tensor parallel x (``x + y``). ``binding_pool``: the pool of the higher
  utilisation (the one a rise in load grows first); ``binding_constraint``: what that pool with one replica
  fewer breaks. ``cheaper_layout``: per configuration, the layout of its cheapest plan meeting the SLOs
  (aggregated on a tie).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from toolkit._model.kv_transfer import link_figures, transfer_ms
from toolkit._model.memory import efficiency_value
from toolkit._model.resolve import resolve_backend, resolve_gpu, resolve_model, resolve_quant
from toolkit._model.serving import cost_model
from toolkit._planning.inputs import _poisson_quantile, _specs
from toolkit._queueing.closed_forms import queue_wait

__all__: list[str] = []

LAYOUTS = ("aggregated", "disaggregated")
KEY = ["model", "gpu", "quant", "backend", "tensor_parallel"]


def check_layouts(layouts: object) -> tuple[str, ...]:
    """``layouts`` as a tuple of ``LAYOUTS`` (a name or an iterable of them), else ``ValueError``."""
    chosen = (layouts,) if isinstance(layouts, str) else tuple(layouts) if hasattr(layouts, "__iter__") else ()
    if not chosen or any(layout not in LAYOUTS for layout in chosen):
        raise ValueError(f"layouts must name one or both of {', '.join(map(repr, LAYOUTS))}; got {layouts!r}")
    return chosen


def _prefill_replicas(cm: Any, rate: float, prompt: int, pct: float, slo: float | None, most: int):
    xs = np.arange(1, most + 1, dtype=float)
    first_ms = float(cm.ttft_ms(prompt))
    service_s = (first_ms - float(cm.request_overhead_ms)) / 1e3
    waits = queue_wait(rate / xs, service_s, ca2=1 / xs, cs2=0.0, percentiles=(pct,))
    ttft = waits[f"wait_p{100 * pct:g}_s"].to_numpy() * 1e3 + first_ms
    stable = waits["stable"].to_numpy()
    ok = stable & (ttft <= (np.inf if slo is None else slo))
    if not ok.any():
        return None
    i = int(np.argmax(ok))
    # what one replica fewer breaks (at one replica: the TTFT SLO where one is given)
    reason = "capacity" if (i and not stable[i - 1]) or (not i and slo is None) else "slo_ttft"
    return i + 1, float(ttft[i]), float(waits["utilization"].iloc[i]), reason


def _decode_replicas(cm, rate, prompt, output, pct, batch, move_ms, budget_ms, slos, most):
    ys = np.arange(1, most + 1, dtype=float)
    tokens = max(output - 1, 1)
    context = prompt + output / 2
    lam = rate / ys
    m = np.full(ys.shape, float(batch))
    for _ in range(50):  # each iterate an upper bound, as the aggregated planner's
        step_s = np.asarray(cm.step_ms(m, m * context), dtype=float) / 1e3
        m = np.minimum(batch, np.maximum(lam * tokens * step_s, 1e-9))
    busy = lam * tokens * np.asarray(cm.step_ms(m, m * context), dtype=float) / 1e3
    n_p = np.minimum(batch, 1 + _poisson_quantile(pct, m))
    step_p = np.asarray(cm.step_ms(n_p, n_p * context), dtype=float)
    tpot = step_p + move_ms / tokens
    e2e = budget_ms + move_ms + slos["q"] * tokens * step_p
    fits, fast = busy < batch, tpot <= slos.get("slo_tpot", np.inf)
    ok = fits & fast & (e2e <= slos.get("slo_e2e", np.inf))
    if not ok.any():
        return None
    i = int(np.argmax(ok))
    j = max(i - 1, 0)  # what one replica fewer breaks
    reason = "capacity" if not fits[j] else "slo_tpot" if not fast[j] else "slo_e2e" if i else "capacity"
    return i + 1, float(tpot[i]), float(e2e[i]), float(busy[i] / batch), reason


def _lookup(kind: str, value: object, catalog: str, resolve) -> dict[str, dict]:
    return {spec["name"]: spec for spec in _specs(kind, value, catalog, resolve)}


def with_disaggregated(table: pd.DataFrame, layouts: tuple[str, ...], inputs: dict[str, Any]) -> pd.DataFrame:
    """``table`` (plan's aggregated rows) with one xPyD row per configuration that can meet the SLOs, the
    columns ``layout``, ``prefill_replicas``, ``decode_replicas``, ``binding_pool`` and ``cheaper_layout``; only
    the xPyD rows where ``layouts`` leaves out ``"aggregated"``."""
    rate, prompt, output, pct = inputs["arrival_rate"], inputs["prompt_tokens"], inputs["output_tokens"], inputs["pct"]
    specs = [
        _lookup(*args)
        for args in (
            ("models", inputs["models"], "models.csv", resolve_model),
            ("gpus", inputs["gpus"], "gpus.csv", resolve_gpu),
            ("quants", inputs["quants"], "quantizations.csv", resolve_quant),
            ("backends", inputs["backends"], "backends.csv", resolve_backend),
        )
    ]
    e2e_col = next(c for c in table.columns if c.startswith("e2e_p"))
    rows = []
    for key, group in table.groupby(KEY, sort=False):
        model, gpu, quant, backend, tp = key
        cm = cost_model(
            specs[0][model], specs[1][gpu], specs[2][quant], tensor_parallel=int(tp), backend=specs[3][backend],
            calibration=inputs["calibration"],
        )  # fmt: skip
        top = group.iloc[0]
        slos = {k: v for k, v in inputs["slos"].items() if v is not None}
        slos["q"] = (top[e2e_col] - top["ttft_ms"]) / (output * top["tpot_ms"]) if top["tpot_ms"] > 0 else 1.0
        pre = _prefill_replicas(cm, rate, prompt, pct, slos.get("slo_ttft"), inputs["max_replicas"])
        if pre is None:
            continue
        nvlink = float(cm.gpu.get("interconnect_gb_s", math.nan)) >= efficiency_value("nvlink_min_gb_s")
        figures = link_figures("nvlink" if nvlink else "pcie", cm.gpu, link_gb_s=None, latency_us=None, efficiency=None)
        move_ms = float(transfer_ms(np.array([prompt]), cm.kv_bytes_per_token, figures)[0])
        batch = int(group["batch"].max())
        dec = _decode_replicas(cm, rate, prompt, output, pct, batch, move_ms, pre[1], slos, inputs["max_replicas"])
        if dec is None:
            continue
        x, y = pre[0], dec[0]
        per_replica = top["cost_usd_month"] / top["replicas"]
        rows.append(
            dict(
                zip(KEY, key), replicas=x + y, batch=batch, utilization=max(pre[2], dec[3]), ttft_ms=pre[1],
                tpot_ms=dec[1], **{e2e_col: dec[2]}, cost_usd_month=per_replica * (x + y),
                cost_usd_per_1m_tokens=top["cost_usd_per_1m_tokens"] / top["replicas"] * (x + y),
                quality=top["quality"], prefix_hit_rate=0.0, meets_slo=True,
                binding_constraint=pre[3] if pre[2] >= dec[3] else dec[4], warnings="",
                layout=f"{x}P{y}D", prefill_replicas=x, decode_replicas=y,
                binding_pool="prefill" if pre[2] >= dec[3] else "decode",
            )
        )  # fmt: skip
    split = pd.DataFrame(
        rows, columns=[*table.columns, "layout", "prefill_replicas", "decode_replicas", "binding_pool"]
    )
    if "speculation_pays" in split.columns:  # not priced for a split (plan(speculation=...)): NaN and False
        split["speculation_pays"] = False
    whole = table.assign(layout="aggregated", prefill_replicas=pd.NA, decode_replicas=pd.NA, binding_pool=pd.NA)
    both = pd.concat([whole, split.astype({"meets_slo": bool})], ignore_index=True)
    met = both[both["meets_slo"]]
    best = met.sort_values("cost_usd_month", kind="stable").drop_duplicates(KEY).set_index(KEY)["layout"]
    both["cheaper_layout"] = [best.get(tuple(k), pd.NA) for k in both[KEY].itertuples(index=False)]
    if "aggregated" not in layouts:
        both = both[both["layout"] != "aggregated"]
    order = np.lexsort((both["cost_usd_month"].to_numpy(), ~both["meets_slo"].to_numpy(dtype=bool)))
    return both.iloc[order].reset_index(drop=True)
