"""pareto(): the non-dominated rows, checked against a plain O(n^2) dominance loop."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit._planning.pareto import pareto

MIN = ("cost_usd_month", "e2e_p95_ms")
MAX = ("quality",)


def _brute_force(df: pd.DataFrame) -> set:
    """Row labels nobody dominates, by the textbook definition, one pair at a time.

    NaN quality counts as the worst quality (the documented rule).
    """

    def key(row):
        q = row["quality"]
        return (row["cost_usd_month"], row["e2e_p95_ms"], -math.inf if pd.isna(q) else q)

    rows = [(label, key(r)) for label, r in df.iterrows()]
    keep = set()
    for i, (li, a) in enumerate(rows):
        dominated = False
        for j, (_, b) in enumerate(rows):
            if i == j:
                continue
            no_worse = b[0] <= a[0] and b[1] <= a[1] and b[2] >= a[2]
            better = b[0] < a[0] or b[1] < a[1] or b[2] > a[2]
            if no_worse and better:
                dominated = True
                break
        if not dominated:
            keep.add(li)
    return keep


# small integer grids make exact ties and partial ties frequent
_values = st.integers(0, 5).map(float)
_quality = st.one_of(st.integers(0, 4).map(float), st.just(math.nan))


@st.composite
def frames(draw):
    n = draw(st.integers(0, 40))
    data = {
        "cost_usd_month": draw(st.lists(_values, min_size=n, max_size=n)),
        "e2e_p95_ms": draw(st.lists(_values, min_size=n, max_size=n)),
        "quality": draw(st.lists(_quality, min_size=n, max_size=n)),
    }
    labels = draw(st.permutations(list(range(100, 100 + n))))
    return pd.DataFrame(data, index=labels)


@settings(max_examples=150, deadline=None)
@given(frames())
def test_equals_brute_force(df):
    front = pareto(df)
    assert set(front.index) == _brute_force(df)
    # rows come back unchanged, index preserved
    pd.testing.assert_frame_equal(front.drop(columns="pick"), df.loc[front.index])


def test_exact_ties_are_all_kept():
    df = pd.DataFrame(
        {"cost_usd_month": [43.2, 43.2, 50.0], "e2e_p95_ms": [2900.0, 2900.0, 3000.0], "quality": [0.6, 0.6, 0.6]},
        index=["vllm", "tgi", "worse"],
    )
    front = pareto(df)
    assert set(front.index) == {"vllm", "tgi"}
    # both tied rows are the cheapest, the fastest and (tied) the best quality
    assert (front["pick"] == "cheapest, fastest, best quality").all()


def test_picks_on_a_three_way_trade_off():
    df = pd.DataFrame(
        {
            "cost_usd_month": [10.0, 20.0, 30.0, 40.0],
            "e2e_p95_ms": [900.0, 500.0, 100.0, 950.0],
            "quality": [0.5, 0.6, 0.55, 0.8],
        }
    )
    front = pareto(df)
    assert list(front.index) == [0, 1, 2, 3]  # nobody dominated; sorted by cost
    assert list(front["pick"]) == ["cheapest", "", "fastest", "best quality"]


def test_nan_quality_is_worst_and_all_nan_axis_drops_out():
    df = pd.DataFrame({"cost_usd_month": [10.0, 10.0], "e2e_p95_ms": [100.0, 100.0], "quality": [np.nan, 0.3]})
    assert list(pareto(df).index) == [1]  # known quality beats unknown at equal cost and latency
    df["quality"] = np.nan
    front = pareto(df)
    assert list(front.index) == [0, 1]  # an exact tie once quality is unknown everywhere
    assert not front["pick"].str.contains("quality").any()


def test_block_evaluation_matches_one_block(monkeypatch):
    rng = np.random.default_rng(1)
    df = pd.DataFrame(rng.integers(0, 30, size=(300, 3)).astype(float), columns=[*MIN, *MAX])
    whole = pareto(df)
    import toolkit._planning.pareto as mod

    monkeypatch.setattr(mod, "_BLOCK_ELEMENTS", 7)  # forces blocks of a single row
    pd.testing.assert_frame_equal(pareto(df), whole)
    assert set(whole.index) == _brute_force(df)


def test_empty_frame_gives_empty_frontier():
    df = pd.DataFrame({c: pd.Series(dtype=float) for c in (*MIN, *MAX)})
    front = pareto(df)
    assert front.empty and "pick" in front.columns


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"minimize": ("nope",)}, "nope"),
        ({"minimize": ("cost_usd_month",), "maximize": ("cost_usd_month",)}, "repeat"),
        ({"minimize": (), "maximize": ()}, "at least one"),
        ({"minimize": ("name",), "maximize": ()}, "numeric"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    df = pd.DataFrame({"cost_usd_month": [1.0], "e2e_p95_ms": [2.0], "quality": [0.5], "name": ["a"]})
    with pytest.raises(ValueError, match=match):
        pareto(df, **kwargs)


def test_not_a_frame_raises():
    with pytest.raises(ValueError, match="df"):
        pareto([1, 2, 3])


def _brute_force_any(costs: np.ndarray) -> np.ndarray:
    """Dominated mask for any number of objectives (smaller is better everywhere), pair by pair."""
    n = len(costs)
    out = np.zeros(n, dtype=bool)
    for i in range(n):
        for j in range(n):
            if i != j and (costs[j] <= costs[i]).all() and (costs[j] < costs[i]).any():
                out[i] = True
                break
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda k: st.lists(
            st.lists(st.one_of(st.integers(0, 3).map(float), st.just(math.inf)), min_size=k, max_size=k),
            max_size=40,
        )
    ),
    st.sampled_from([1, 2048]),
)
def test_every_skyline_path_equals_brute_force(rows, max_levels):
    """The running-minimum path (<= 3 objectives) and the block path (more objectives, or more
    levels than the limit: forced with a limit of 1) both return the brute force's rows."""
    from toolkit._planning import pareto as module

    costs = np.array(rows, dtype=float).reshape(len(rows), -1 if rows else 0)
    if costs.size == 0:
        return
    original = module._MAX_LEVELS
    module._MAX_LEVELS = max_levels
    try:
        got = module._dominated(costs)
    finally:
        module._MAX_LEVELS = original
    np.testing.assert_array_equal(got, _brute_force_any(costs))
