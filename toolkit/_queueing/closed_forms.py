"""Closed-form queue waits: M/M/1, M/D/1, M/G/1, Kingman G/G/1, M/M/c (Erlang C), Allen-Cunneen G/G/c.

Every formula here is one special case of the same two-moment expression,

    E[W] = (ca2 + cs2) / 2 * C(c, a) / (c * mu - lambda),

where ``C(c, a)`` is the Erlang C probability of waiting with ``c`` servers at offered load
``a = lambda / mu``. With ``c = 1``, ``C = rho`` and the expression is Kingman's G/G/1 bound-shaped
approximation; with ``ca2 = 1`` it is the exact Pollaczek-Khinchine M/G/1 mean (``cs2 = 0``: M/D/1,
``cs2 = 1``: M/M/1); with ``ca2 = cs2 = 1`` it is the exact M/M/c mean. For ``c > 1`` and other
variances it is the Allen-Cunneen approximation.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from toolkit._args import check_array
from toolkit._data import load_csv
from toolkit._vocab.keywords import positional_deprecated

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["erlang_c", "queue_wait", "workload_presets"]

_WORKLOADS_CSV = "workloads.csv"
# The Erlang B recursion below is O(servers); this ceiling (the planner's max_replicas too) keeps one
# call well under a second.
MAX_SERVERS = 100_000


def _numbers(name: str, value: object, **bounds) -> np.ndarray:
    """``check_array`` that also refuses strings and booleans instead of converting them."""
    try:
        kind = np.asarray(value).dtype.kind
    except (TypeError, ValueError):
        kind = "O"
    if kind not in "iuf":
        raise ValueError(f"{name} must be numbers, got {value!r}")
    return check_array(name, value, **bounds)


def _as_servers(name: str, value: object) -> np.ndarray:
    arr = _numbers(name, value, low=1, high=MAX_SERVERS)
    if not np.all(arr == np.floor(arr)):
        raise ValueError(f"{name} must be integers (>= 1 and <= {MAX_SERVERS:g}), got {value!r}")
    return arr.astype(np.int64)


def _erlang_c(servers: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Erlang C on already-broadcast arrays; 1.0 wherever ``load >= servers``."""
    # Erlang B by its recursion B(k) = a B(k-1) / (k + a B(k-1)), B(0) = 1: every term stays in
    # [0, 1], so it neither overflows (as a^c / c! does) nor cancels. Each element stops at its own
    # c: sorted by c, step k updates only the tail with c >= k, so the work is the sum of the c's
    # rather than the number of elements x the largest c. Once that whole tail has underflowed to
    # exactly 0 (k far above the loads), every later step would leave it 0, so the loop stops.
    order = np.argsort(servers, axis=None, kind="stable")
    count = servers.ravel()[order]
    a = load.ravel()[order]
    b_sorted = np.ones(count.shape)
    ab = np.empty(count.shape)
    top = int(count.max(initial=0))
    finite = bool(np.isfinite(a).all())  # 0 x inf would not stay 0
    for k, start in zip(range(1, top + 1), count.searchsorted(np.arange(1, top + 1)).tolist()):
        np.multiply(a[start:], b_sorted[start:], out=ab[start:])
        np.divide(ab[start:], ab[start:] + k, out=b_sorted[start:])
        if k % 16 == 0 and finite and not b_sorted[start:].any():
            break
    b = np.empty(count.shape)
    b[order] = b_sorted
    b = b.reshape(servers.shape)
    stable = load < servers
    with np.errstate(divide="ignore", invalid="ignore"):
        c = servers * b / (servers - load * (1.0 - b))
    return np.where(stable, c, 1.0)


def erlang_c(servers: object, offered_load: object) -> float | np.ndarray:
    """Probability that an arriving request waits in an M/M/c queue (Erlang C).

    Computed through the Erlang B recursion, which is numerically stable for thousands of
    servers, and vectorised: ``servers`` and ``offered_load`` broadcast against each other.
    Its cost grows with ``c``, hence the ceiling of 100,000 servers.

    Parameters
    ----------
    servers : int or array of int
        Number of servers ``c`` (1 to 100,000).
    offered_load : float or array
        Offered load ``a = arrival_rate * mean_service_time`` in Erlangs (>= 0). The per-server
        utilisation is ``a / c``.

    Returns
    -------
    float or numpy.ndarray
        ``C(c, a)`` in [0, 1]; a float when both inputs are scalars, else an array of the broadcast
        shape. Where ``a >= c`` the queue is unstable and every request waits: the value is 1.0.
    """
    scalar = np.ndim(servers) == 0 and np.ndim(offered_load) == 0
    c = _as_servers("servers", servers)
    a = _numbers("offered_load", offered_load, low=0)
    try:
        c, a = np.broadcast_arrays(c, a)
    except ValueError:
        raise ValueError("servers and offered_load must broadcast to one shape") from None
    out = _erlang_c(c, a)
    return float(out[0]) if scalar else out


def _method(servers: np.ndarray, ca2: np.ndarray, cs2: np.ndarray) -> np.ndarray:
    single = servers == 1
    poisson = ca2 == 1.0
    return np.select(
        [
            single & poisson & (cs2 == 1.0),
            single & poisson & (cs2 == 0.0),
            single & poisson,
            single,
            poisson & (cs2 == 1.0),
        ],
        [
            "M/M/1",
            "M/D/1",
            "M/G/1 (Pollaczek-Khinchine)",
            "G/G/1 (Kingman)",
            "M/M/c (Erlang C)",
        ],
        default="G/G/c (Allen-Cunneen)",
    )


def _percentile_column(q: float) -> str:
    return f"wait_p{q * 100:g}_s"


def workload_presets() -> pd.DataFrame:
    """Service-time variance presets for LLM workloads, and where the closed form under-estimates.

    Parameters
    ----------
    None

    Returns
    -------
    pandas.DataFrame
        One row per preset, from ``data/workloads.csv``: ``preset`` (steady, chatbot, bursty,
        agent), ``cs2`` (squared coefficient of variation of the service time, dimensionless; the
        values are chimeraforge 0.6.0's ``WORKLOAD_CV2``), ``tail_underestimated`` (bool: the
        closed-form tail is known to fall short of simulation at this variance; from cs2 4 up),
        ``p95_rel_err_min``, ``p95_rel_err_max``, ``p99_rel_err_min``, ``p99_rel_err_max`` (range of
        ``closed / simulated - 1`` of the p95 and p99 wait over utilisation 0.3..0.95, one server,
        gamma and hyperexponential service, measured with :func:`toolkit.compare_wait_models`;
        negative = under-estimate), ``source``.
    """
    return load_csv(_WORKLOADS_CSV)


def _tail_warning(cs2: np.ndarray) -> None:
    presets = workload_presets()
    flagged = presets[presets["tail_underestimated"].astype(bool)].sort_values("cs2")
    threshold = float(flagged["cs2"].min())
    if not np.any(cs2 >= threshold):
        return
    sizes = "; ".join(
        f"{row.preset} cs2={row.cs2:g}: p95 by up to {-row.p95_rel_err_min:.0%}, "
        f"p99 by up to {-row.p99_rel_err_min:.0%}"
        for row in flagged.itertuples()
    )
    warnings.warn(
        f"cs2 >= {threshold:g}: the two-moment (Allen-Cunneen/Kingman) tail under-estimates the wait "
        f"against simulation ({sizes}). Worst for hyperexponential service at utilisation 0.3-0.5 (see "
        "compare_wait_models); check with simulate() or a load test",
        UserWarning,
        stacklevel=4,  # queue_wait's caller, past its keyword wrapper (toolkit._vocab.keywords)
    )


def _waits(
    lam: np.ndarray, svc: np.ndarray, c: np.ndarray, ca2: object, cs2: object, qs: np.ndarray
) -> dict[str, object]:
    """The closed form behind :func:`queue_wait` on validated arrays (``lam``, ``svc``, ``c`` of one
    shape; ``ca2``, ``cs2`` broadcast to it): ``utilization``, ``p_wait``, ``wait_mean_s``, ``stable``
    and ``waits``, one array per quantile in ``qs``. No validation, warning or DataFrame, for callers
    that evaluate it many times (the planner)."""
    load = lam * svc
    rho = load / c
    stable = rho < 1.0
    p_wait = _erlang_c(c, load)
    factor = (ca2 + cs2) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = np.where(stable, factor * svc / (c - load), np.inf)  # factor / (c*mu - lambda)
        wait_mean = np.where(stable, p_wait * theta, np.inf)
    waits = []
    for q in qs:
        with np.errstate(divide="ignore", invalid="ignore"):
            wq = theta * np.log(p_wait / (1.0 - q))
        waits.append(np.where(stable, np.where(p_wait > 1.0 - q, wq, 0.0), np.inf))
    return {"utilization": rho, "p_wait": p_wait, "wait_mean_s": wait_mean, "stable": stable, "waits": waits}


@positional_deprecated
def queue_wait(
    arrival_rate: object,
    service_time_s: object,
    *,
    servers: object = 1,
    ca2: object = 1.0,
    cs2: object = 1.0,
    percentiles: Sequence[float] = (0.5, 0.95, 0.99),
) -> pd.DataFrame:
    """Mean and percentile queueing delay of a FIFO queue with ``servers`` identical servers.

    All numeric arguments broadcast against each other (numpy rules); the result has one row per
    element of the broadcast shape, in C order.

    **Mean.** ``E[W] = (ca2 + cs2) / 2 * C(c, a) / (c*mu - lambda)`` with ``mu = 1/service_time_s``,
    ``a = lambda/mu``, ``rho = a/c`` and ``C`` the Erlang C probability (:func:`erlang_c`). It is
    exact for M/M/c (``ca2 = cs2 = 1``) and, with one server and Poisson arrivals, for M/G/1 by
    Pollaczek-Khinchine (M/D/1: ``rho / (2 mu (1 - rho))``); otherwise it is Kingman's (c = 1) or
    the Allen-Cunneen (c > 1) two-moment approximation.

    **Percentiles.** In M/M/c a request waits with probability ``p_wait = C(c, a)``, and given that
    it waits its wait is exponential with rate ``c*mu - lambda`` (the queue drains at that rate
    while all servers are busy). So ``P(W > t) = p_wait * exp(-t / theta)`` with conditional mean
    ``theta = E[W | W > 0] = 1 / (c*mu - lambda)``. For other variances the same shape is kept and
    ``theta`` is scaled by the two-moment factor, ``theta = (ca2 + cs2) / 2 / (c*mu - lambda)``, so
    that ``p_wait * theta`` equals the mean above. Inverting, the ``q`` quantile is

        ``W_q = theta * ln(p_wait / (1 - q))``  when ``q > 1 - p_wait``, else ``0``

    (at most a fraction ``1 - p_wait`` of requests start at once, so low percentiles are zero).
    For M/M/1 this gives ``W_0.95 = ln(rho / 0.05) / (mu - lambda)``. The percentiles are exact
    for M/M/c only. Measured against simulation (:func:`toolkit.compare_wait_models`, one server,
    utilisation 0.3-0.95): within 1% for ``cs2 = 1``; for ``cs2 = 0`` the p95 is *over*-estimated
    (+20% at utilisation 0.3, +7% at 0.7, +1% at 0.95); for ``cs2 >= 4`` it is *under*-estimated,
    by up to 6% for gamma service and 13-16% for hyperexponential service (p99: up to 27%),
    worst at low utilisation, so a ``UserWarning`` is emitted there (sizes in
    :func:`workload_presets`).

    **Unstable queues.** Where ``rho >= 1`` the row has ``stable=False``, ``p_wait = 1`` and every
    wait is ``inf``: an overloaded queue is never reported with a finite or negative wait.

    Parameters
    ----------
    arrival_rate : float or array
        Arrival rate ``lambda`` in requests per second (>= 0).
    service_time_s : float or array
        Mean service time ``1/mu`` of one request on one server, in seconds (> 0).
    servers : int or array of int
        Number of servers ``c`` sharing one FIFO queue (1 to 100,000).
    ca2 : float or array
        Squared coefficient of variation of inter-arrival times (>= 0; 1 = Poisson).
    cs2 : float or array
        Squared coefficient of variation of service times (>= 0; 0 = deterministic,
        1 = exponential). Presets: :func:`workload_presets`.
    percentiles : sequence of float
        Wait quantiles to report, each strictly between 0 and 1; each gives a column
        ``wait_p{100*q:g}_s``.

    Returns
    -------
    pandas.DataFrame
        Columns ``arrival_rate`` (1/s), ``service_time_s`` (s), ``servers``, ``ca2``, ``cs2``,
        ``utilization`` (``rho``, per server), ``p_wait`` (probability of waiting), ``wait_mean_s``
        (s), one ``wait_p{q}_s`` per percentile (s; default ``wait_p50_s``, ``wait_p95_s``,
        ``wait_p99_s``), ``stable`` (bool) and ``method`` (the queue model the row is exact or
        approximate for: M/M/1, M/D/1, M/G/1 (Pollaczek-Khinchine), G/G/1 (Kingman),
        M/M/c (Erlang C), G/G/c (Allen-Cunneen)).

    Warns
    -----
    UserWarning
        When any ``cs2`` reaches the high-variance threshold of ``data/workloads.csv`` (4), where
        the percentile approximation under-estimates the tail.
    """
    lam = _numbers("arrival_rate", arrival_rate, low=0)
    svc = _numbers("service_time_s", service_time_s, low=0, low_inclusive=False)
    c = _as_servers("servers", servers)
    ca2 = _numbers("ca2", ca2, low=0)
    cs2 = _numbers("cs2", cs2, low=0)
    try:
        qs = np.asarray(percentiles, dtype=float).ravel()
    except (TypeError, ValueError):
        qs = np.array([])
    if qs.size == 0 or not np.all((qs > 0) & (qs < 1)):
        raise ValueError(f"percentiles must be a non-empty sequence of numbers in (0, 1), got {percentiles!r}")
    names = [_percentile_column(q) for q in qs]
    if len(set(names)) != len(names):
        raise ValueError(f"percentiles must be distinct, got {percentiles!r}")
    try:
        lam, svc, c, ca2, cs2 = (x.ravel() for x in np.broadcast_arrays(lam, svc, c, ca2, cs2))
    except ValueError:
        raise ValueError("arrival_rate, service_time_s, servers, ca2 and cs2 must broadcast to one shape") from None
    _tail_warning(cs2)
    core = _waits(lam, svc, c, ca2, cs2, qs)
    out = {"arrival_rate": lam, "service_time_s": svc, "servers": c, "ca2": ca2, "cs2": cs2}
    out.update((name, core[name]) for name in ("utilization", "p_wait", "wait_mean_s"))
    out.update(zip(names, core["waits"]))
    out["stable"] = core["stable"]
    out["method"] = _method(c, ca2, cs2)
    import pandas as pd  # the planner and the command line use the closed form without pandas

    return pd.DataFrame(out)
