"""Closed-form queue waits against textbook values, and their properties."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolkit
from toolkit._queueing.closed_forms import erlang_c, queue_wait, workload_presets


def _quiet(*args, **kwargs) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return queue_wait(*args, **kwargs)


def _erlang_c_textbook(c: int, a: float) -> float:
    """Erlang C from its defining sums (fine for small c)."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


# ---- Erlang C ----------------------------------------------------------------------------------------


def test_erlang_c_two_servers_at_load_1_5_is_9_over_14():
    # sum_{k<2} a^k/k! = 1 + 1.5 = 2.5; a^2/2! * c/(c-a) = 1.125 * 4 = 4.5; C = 4.5 / 7 = 9/14
    assert erlang_c(2, 1.5) == pytest.approx(9 / 14, rel=1e-12)


def test_erlang_c_single_server_is_utilisation():
    loads = np.array([0.0, 0.1, 0.5, 0.9])
    np.testing.assert_allclose(erlang_c(1, loads), loads, rtol=1e-12)


@pytest.mark.parametrize("c, a", [(3, 2.0), (5, 4.2), (10, 7.5), (20, 19.0)])
def test_erlang_c_matches_the_defining_sums(c, a):
    assert erlang_c(c, a) == pytest.approx(_erlang_c_textbook(c, a), rel=1e-10)


def test_erlang_c_is_stable_for_thousands_of_servers():
    # a^c / c! overflows a float long before c = 2000; the Erlang B recursion does not. Square-root
    # staffing c = a + beta sqrt(a) gives C -> (1 + beta Phi(beta)/phi(beta))^-1 (Halfin-Whitt 1981);
    # beta = 1: Phi(1) = 0.841345, phi(1) = 0.241971 -> 0.2234. The finite-c value is near it.
    a = 2000.0
    c = int(a + math.sqrt(a))
    value = erlang_c(c, a)
    assert math.isfinite(value)
    assert value == pytest.approx(1 / (1 + 0.841345 / 0.241971), abs=0.02)


def test_erlang_c_vectorises_over_servers_and_load():
    servers = np.array([[1], [2], [4]])
    loads = np.array([0.5, 1.5, 3.5])
    out = erlang_c(servers, loads)
    assert out.shape == (3, 3)
    assert out[1, 1] == pytest.approx(9 / 14)
    assert out[0, 1] == 1.0 and out[1, 2] == 1.0  # load >= servers: everyone waits
    assert out[2, 2] == pytest.approx(_erlang_c_textbook(4, 3.5), rel=1e-10)


@pytest.mark.parametrize("servers, load", [(0, 1.0), (1.5, 1.0), (2, -0.1), (2, math.nan), ("2", 1.0)])
def test_erlang_c_rejects_bad_input_by_name(servers, load):
    with pytest.raises(ValueError, match="servers|offered_load"):
        erlang_c(servers, load)


# ---- single server -------------------------------------------------------------------------------------


def test_mm1_mean_and_p95():
    lam, mu = 8.0, 10.0
    row = queue_wait(lam, 1 / mu).iloc[0]
    rho = lam / mu
    assert row["method"] == "M/M/1"
    assert row["p_wait"] == pytest.approx(rho)
    assert row["wait_mean_s"] == pytest.approx(rho / (mu - lam))  # 0.4 s
    assert row["wait_p95_s"] == pytest.approx(math.log(rho / 0.05) / (mu - lam))  # ln 16 / 2
    assert row["wait_p99_s"] == pytest.approx(math.log(rho / 0.01) / (mu - lam))
    # P(W > t) = rho exp(-(mu - lam) t): the median is ln(rho / 0.5) / (mu - lam) when rho > 0.5
    assert row["wait_p50_s"] == pytest.approx(math.log(rho / 0.5) / (mu - lam))


def test_md1_mean_is_half_of_mm1():
    lam, mu = 3.0, 5.0
    rho = lam / mu
    row = queue_wait(lam, 1 / mu, cs2=0.0).iloc[0]
    assert row["method"] == "M/D/1"
    assert row["wait_mean_s"] == pytest.approx(rho / (2 * mu * (1 - rho)))  # 0.15 s


def test_pollaczek_khinchine_mean():
    # M/G/1 with uniform(0, 2) s service: E[S] = 1, E[S^2] = 4/3, cs2 = 1/3; lambda = 0.6
    # P-K: W = lambda E[S^2] / (2 (1 - rho)) = 0.6 * 4/3 / 0.8 = 1.0 s
    row = queue_wait(0.6, 1.0, cs2=1 / 3).iloc[0]
    assert row["method"] == "M/G/1 (Pollaczek-Khinchine)"
    assert row["wait_mean_s"] == pytest.approx(1.0)


def test_kingman_gg1_mean():
    # Kingman: W ~ rho/(1-rho) * (ca2 + cs2)/2 * E[S]; rho 0.75, ca2 0.5, cs2 2, E[S] 0.2 -> 3 * 1.25 * 0.2
    row = queue_wait(3.75, 0.2, ca2=0.5, cs2=2.0).iloc[0]
    assert row["method"] == "G/G/1 (Kingman)"
    assert row["wait_mean_s"] == pytest.approx(0.75)


def test_low_percentiles_are_zero_when_most_requests_do_not_wait():
    # M/M/1 at rho = 0.3: 70% of requests start at once, so the median wait is 0
    row = queue_wait(0.3, 1.0).iloc[0]
    assert row["wait_p50_s"] == 0.0
    assert row["wait_p95_s"] > 0


def test_zero_arrivals_wait_nothing():
    row = queue_wait(0.0, 1.0, servers=3).iloc[0]
    assert row["p_wait"] == 0 and row["wait_mean_s"] == 0 and row["wait_p99_s"] == 0 and row["stable"]


# ---- several servers -----------------------------------------------------------------------------------


def test_allen_cunneen_with_poisson_and_exponential_is_mmc():
    lam, mu, c = 7.0, 1.0, 9
    a = lam / mu
    pw = _erlang_c_textbook(c, a)
    row = queue_wait(lam, 1 / mu, servers=c, ca2=1.0, cs2=1.0).iloc[0]
    assert row["method"] == "M/M/c (Erlang C)"
    assert row["p_wait"] == pytest.approx(pw, rel=1e-10)
    assert row["wait_mean_s"] == pytest.approx(pw / (c * mu - lam), rel=1e-10)
    # M/M/c: P(W > t) = C exp(-(c mu - lam) t) -> t_95 = ln(C / 0.05) / (c mu - lam)
    assert row["wait_p95_s"] == pytest.approx(math.log(pw / 0.05) / (c * mu - lam), rel=1e-10)


def test_allen_cunneen_scales_mmc_by_the_variance_factor():
    mmc = queue_wait(3.0, 1.0, servers=4).iloc[0]
    gg = _quiet(3.0, 1.0, servers=4, ca2=0.5, cs2=4.5).iloc[0]
    assert gg["method"] == "G/G/c (Allen-Cunneen)"
    assert gg["wait_mean_s"] == pytest.approx(mmc["wait_mean_s"] * (0.5 + 4.5) / 2)
    assert gg["p_wait"] == pytest.approx(mmc["p_wait"])


def test_mm2_from_the_9_over_14_case():
    # lambda 1.5, mu 1, c 2: C = 9/14, W = C / (c mu - lambda) = 9/14 / 0.5 = 9/7 s
    row = queue_wait(1.5, 1.0, servers=2).iloc[0]
    assert row["wait_mean_s"] == pytest.approx(9 / 7)


# ---- instability, shapes, inputs -------------------------------------------------------------------------


@pytest.mark.parametrize("lam", [1.0, 1.5, 100.0])
def test_unstable_queue_is_flagged_with_infinite_waits(lam):
    row = queue_wait(lam, 1.0).iloc[0]
    assert not row["stable"]
    assert row["p_wait"] == 1.0
    for col in ("wait_mean_s", "wait_p50_s", "wait_p95_s", "wait_p99_s"):
        assert row[col] == math.inf


def test_arrays_broadcast_to_one_row_per_element():
    df = queue_wait(np.array([1.0, 2.0, 3.0]), np.array([[0.1], [0.2]]), servers=[[1], [2]])
    assert len(df) == 6
    assert list(df.columns[:5]) == ["arrival_rate", "service_time_s", "servers", "ca2", "cs2"]
    for col in ("utilization", "p_wait", "wait_mean_s", "wait_p50_s", "wait_p95_s", "wait_p99_s", "stable", "method"):
        assert col in df.columns
    np.testing.assert_allclose(df["utilization"], df["arrival_rate"] * df["service_time_s"] / df["servers"])


def test_percentile_columns_follow_the_argument():
    df = queue_wait(0.5, 1.0, percentiles=(0.9, 0.999))
    assert "wait_p90_s" in df.columns and "wait_p99.9_s" in df.columns
    assert "wait_p95_s" not in df.columns


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"arrival_rate": -1.0, "service_time_s": 1.0}, r"arrival_rate must be \(>= 0\), got -1.0$"),
        ({"arrival_rate": [1.0, 2.0, -3.0], "service_time_s": 1.0}, r"got -3.0$"),  # the offending element, plainly
        ({"arrival_rate": 1.0, "service_time_s": 0.0}, "service_time_s"),
        ({"arrival_rate": math.inf, "service_time_s": 1.0}, "arrival_rate"),
        ({"arrival_rate": 1.0, "service_time_s": 2.0, "servers": 0}, "servers"),
        ({"arrival_rate": 1.0, "service_time_s": 2.0, "servers": 2.5}, "servers"),
        ({"arrival_rate": 1.0, "service_time_s": 0.5, "ca2": -1.0}, "ca2"),
        ({"arrival_rate": 1.0, "service_time_s": 0.5, "cs2": math.nan}, "cs2"),
        ({"arrival_rate": 1.0, "service_time_s": 0.5, "percentiles": (95,)}, "percentiles"),
        ({"arrival_rate": 1.0, "service_time_s": 0.5, "percentiles": ()}, "percentiles"),
        ({"arrival_rate": [1.0, 2.0], "service_time_s": [0.1, 0.2, 0.3]}, "broadcast"),
    ],
)
def test_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        queue_wait(**kwargs)


# ---- presets and the high-variance warning ------------------------------------------------------------


def test_workload_presets_are_chimeraforges_with_a_source():
    df = workload_presets()
    assert dict(zip(df["preset"], df["cs2"])) == {"steady": 0, "chatbot": 1, "bursty": 4, "agent": 8}
    assert df["source"].str.contains("chimeraforge 0.6.0").all()
    assert list(df.loc[df["tail_underestimated"], "preset"]) == ["bursty", "agent"]
    # the recorded under-estimates are under-estimates, larger at p99 than at p95
    flagged = df[df["tail_underestimated"]]
    assert (flagged["p95_rel_err_min"] < 0).all()
    assert (flagged["p99_rel_err_min"] < flagged["p95_rel_err_min"]).all()


def test_high_variance_warns_with_the_measured_size():
    with pytest.warns(UserWarning, match=r"under-estimates.*\d+%"):
        queue_wait(0.5, 1.0, cs2=4.0)
    with pytest.warns(UserWarning):
        queue_wait(0.5, 1.0, cs2=[0.0, 8.0])


def test_low_variance_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        queue_wait(0.5, 1.0, cs2=[0.0, 1.0, 3.9])


def test_public_names_are_exported():
    assert toolkit.queue_wait is queue_wait
    assert toolkit.erlang_c is erlang_c
    assert toolkit.workload_presets is workload_presets


# ---- properties -------------------------------------------------------------------------------------------

_rate = st.floats(0.0, 50.0)
_service = st.floats(1e-3, 10.0)
_servers = st.integers(1, 64)
_var = st.floats(0.0, 3.9)


@settings(max_examples=60, deadline=None)
@given(lam=_rate, s=_service, c=_servers, ca2=_var, cs2=_var)
def test_waits_are_ordered_nonnegative_and_finite_exactly_when_stable(lam, s, c, ca2, cs2):
    row = queue_wait(lam, s, servers=c, ca2=ca2, cs2=cs2).iloc[0]
    waits = row[["wait_p50_s", "wait_p95_s", "wait_p99_s"]].to_numpy(dtype=float)
    assert 0.0 <= row["p_wait"] <= 1.0
    assert np.all(waits >= 0) and row["wait_mean_s"] >= 0
    assert np.all(waits[1:] >= waits[:-1])
    assert row["stable"] == (lam * s / c < 1)
    assert np.all(np.isfinite(waits)) == bool(row["stable"])
    assert math.isfinite(row["wait_mean_s"]) == bool(row["stable"])


@settings(max_examples=60, deadline=None)
@given(lam=st.floats(0.01, 50.0), s=_service, c=_servers, ca2=_var, cs2=_var, q=st.floats(0.05, 0.995))
def test_percentile_inverts_the_documented_tail(lam, s, c, ca2, cs2, q):
    # P(W > t) = p_wait exp(-t / theta) with theta = E[W] / p_wait: at t = W_q it equals 1 - q
    row = queue_wait(lam, s, servers=c, ca2=ca2, cs2=cs2, percentiles=(q,)).iloc[0]
    col = [k for k in row.index if k.startswith("wait_p") and k != "wait_mean_s"][0]
    if not row["stable"] or row["wait_mean_s"] == 0 or row["p_wait"] <= 1 - q:
        return
    theta = row["wait_mean_s"] / row["p_wait"]
    assert row["p_wait"] * math.exp(-row[col] / theta) == pytest.approx(1 - q, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(lam=st.floats(0.01, 20.0), s=_service, c=_servers, extra=st.floats(0.01, 5.0))
def test_more_load_or_fewer_servers_never_shortens_the_wait(lam, s, c, extra):
    base = queue_wait(lam, s, servers=c).iloc[0]
    busier = queue_wait(lam + extra, s, servers=c).iloc[0]
    more_servers = queue_wait(lam, s, servers=c + 1).iloc[0]
    assert busier["wait_mean_s"] >= base["wait_mean_s"]
    assert busier["wait_p95_s"] >= base["wait_p95_s"]
    assert more_servers["wait_mean_s"] <= base["wait_mean_s"]
    assert more_servers["p_wait"] <= base["p_wait"] + 1e-12


@settings(max_examples=60, deadline=None)
@given(c=st.integers(1, 30), a=st.floats(0.0, 40.0))
def test_erlang_c_is_a_probability_and_one_when_overloaded(c, a):
    value = erlang_c(c, a)
    assert 0.0 <= value <= 1.0
    if a >= c:
        assert value == 1.0
    elif c <= 12:
        assert value == pytest.approx(_erlang_c_textbook(c, a), rel=1e-9, abs=1e-300)
