"""Planning for a production trace: its variability in the closed form, its requests in the simulator.

``plan(workload=<trace frame>)`` takes the service-time variance (``cs2`` of the trace's output
tokens) and the arrival variability (``ca2`` of its gaps, split over replicas round robin: a
replica's gaps are sums of ``replicas`` consecutive gaps, so ``ca2 / replicas``) from the trace
instead of a preset. The closed form cannot see what the trace does over minutes (bursts, drift),
so the cheapest plans on the cost-latency frontier are then checked by replaying the trace itself
through the simulator on each configuration (``verify.py``), and both answers are reported side by side.
"""

from __future__ import annotations

import pandas as pd

from toolkit._workload.describe import describe_workload

__all__: list[str] = []


def trace_variability(trace: pd.DataFrame) -> tuple[float, float]:
    """(cs2 of output tokens, ca2 of inter-arrival gaps) of a trace frame."""
    summary = describe_workload(trace).summary.iloc[0]
    return float(summary["output_cs2"]), float(summary["ca2"])
