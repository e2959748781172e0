"""The load description: what arrives at a fleet, in the names every layer uses.

``arrival_rate`` (requests/s), ``ca2`` (the squared coefficient of variation of the gaps between
arrivals: 1 for Poisson, above 1 for bursty traffic), ``prompt_tokens`` and ``output_tokens`` (per
request), ``cs2`` (the squared coefficient of variation of the service time, set by the spread of
output lengths) or, instead of the synthetic description, a ``trace`` (a frame of
:func:`toolkit.load_trace`'s columns). :func:`toolkit.simulate`, :func:`toolkit.plan`,
:func:`toolkit.queue_wait` and :func:`toolkit.simulate_grid` take these as keyword arguments of the
same names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__: list[str] = []


@dataclass(frozen=True)
class Load:
    """One load, as the planner hands it to plan verification.

    Parameters
    ----------
    arrival_rate : float
        Requests per second offered to the whole fleet.
    prompt_tokens, output_tokens : int
        Tokens per request (the means where lengths vary).
    ca2 : float
        Squared coefficient of variation of the inter-arrival gaps (1: Poisson).
    cs2 : float
        Squared coefficient of variation of the service time (0: fixed output lengths, 1: geometric).
    trace : pandas.DataFrame or None
        A request trace replayed instead of the synthetic description.
    """

    arrival_rate: float
    prompt_tokens: int
    output_tokens: int
    ca2: float = 1.0
    cs2: float = 1.0
    trace: Any = None
