"""The fit's standard errors on a profile: as wide as the run-to-run spread they stand for.

A profile's requests come in waves, and the requests of one wave share its conditions (the host's
state, the server's slots): when a wave runs slow, all of it does. Standard errors that count every
request as independent shrink with the requests per wave and understate how far the fit moves from
one run to the next. Here synthetic profiles of a server with known efficiencies get a random factor
per wave (2%) and a little per request (0.5%); over many such runs the spread of the fitted values is
measured directly, and the reported standard errors are checked against it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from toolkit._calibration.calibrate import calibrate
from toolkit._model.serving import cost_model

MODEL, GPU, QUANT = "Llama-3.1-8B", "H100 SXM", "bf16"
TRUTH = {"mbu": 0.6, "mfu": 0.4, "step_overhead_ms": 6.0, "request_overhead_ms": 20.0}
FIT = tuple(TRUTH)
# (cell, batch, prompt tokens, output tokens), as toolkit.profile designs them
# (the long decode context holds a quarter of the weights' bytes in KV, so that mbu and the step
# overhead are told apart)
CELLS = [("decode", 1, 64, 32), ("decode", 1, 32768, 32)]
CELLS += [("batch", b, 64, 32) for b in (2, 8, 16)]
CELLS += [("prefill", 1, p, 1) for p in (512, 2048, 8192)]
REPEATS = 3
RUNS = 24
PLAIN_RUNS = 8


def _profile(seed: int, wave_noise: float = 0.02, request_noise: float = 0.005, truth: dict = TRUTH) -> pd.DataFrame:
    """A profile frame whose step times and TTFTs follow the documented observation model exactly
    (efficiencies ``truth``), times a factor per wave and a smaller one per request."""
    cm = cost_model(MODEL, GPU, QUANT, **truth)
    rng = np.random.default_rng(seed)
    rows, wave = [], 0
    for repeat in range(REPEATS):
        for cell, batch, prompt, output in CELLS:
            slow = 1 + wave_noise * rng.standard_normal()
            step = float(cm.step_ms(batch, batch * (prompt + output / 2)))
            ttft = float(cm.ttft_ms(prompt))
            for request in range(batch):
                jitter = 1 + request_noise * rng.standard_normal(2)
                rows.append(
                    {
                        "cell": cell,
                        "repeat": repeat,
                        "wave": wave,
                        "batch": batch,
                        "request": request,
                        "prompt_tokens_target": prompt,
                        "prompt_tokens": prompt,
                        "cached_tokens": 0,
                        "output_tokens": output,
                        "ttft_ms": ttft * slow * jitter[0],
                        "tpot_ms": step * slow * jitter[1],
                        "itl_ms_p50": step * slow * jitter[1],
                        "outcome": "ok",
                        "noisy": False,
                    }
                )
            wave += 1
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def runs() -> dict[str, pd.DataFrame]:
    """The fits of RUNS independent profiles, with the waves known and with them dropped."""
    clustered, plain = [], []
    for seed in range(RUNS):
        frame = _profile(seed)
        clustered.append(calibrate(frame, MODEL, GPU, QUANT, fit=FIT))
        if seed < PLAIN_RUNS:
            plain.append(calibrate(frame.drop(columns="wave"), MODEL, GPU, QUANT, fit=FIT))
    return {"clustered": pd.concat(clustered, ignore_index=True), "plain": pd.concat(plain, ignore_index=True)}


def test_the_synthetic_profile_fits_without_holding_anything(runs):
    # with 2% per wave the step overhead is the least determined (about 15% standard error); a run or
    # two of 24 may hold it, the rest fit everything
    fits = runs["clustered"]
    assert fits["held"].eq("").sum() >= 20, fits["held_reason"].tolist()
    for name, value in TRUTH.items():
        assert fits[name].median() == pytest.approx(value, rel=0.05), name


def test_clustered_standard_errors_match_the_spread_between_runs(runs):
    fits = runs["clustered"]
    fits = fits[fits["held"].eq("")]  # a held parameter moves the others: compare like with like
    for name, value in TRUTH.items():
        spread = fits[name].std(ddof=1)  # how far the fit moves from one run to the next
        reported = fits[f"{name}_se"].median()
        assert 0.6 * spread <= reported <= 1.8 * spread, (name, reported, spread)
        # and the 95% interval holds the truth in most runs (19 of 20 expected)
        inside = (fits[name] - value).abs() <= 1.96 * fits[f"{name}_se"]
        assert inside.mean() >= 0.8, (name, inside.mean())


def test_plain_standard_errors_understate_the_spread_that_clusters_show(runs):
    # the same fits with each request counted as independent: the same values, smaller errors, below
    # the spread between runs; the clustered errors are the closer to it (in our runs plain ones were
    # 0.7-0.85 of the spread, clustered ones 0.85-1.0)
    fits, plain = runs["clustered"], runs["plain"]
    same = fits.iloc[:PLAIN_RUNS]
    kept = fits[fits["held"].eq("")]
    for name in TRUTH:
        assert plain[name].tolist() == pytest.approx(same[name].tolist(), rel=1e-9), name
        assert (same[f"{name}_se"].to_numpy() >= plain[f"{name}_se"].to_numpy() * (1 - 1e-9)).all(), name
        spread = kept[name].std(ddof=1)
        clustered, independent = kept[f"{name}_se"].median(), plain[f"{name}_se"].median()
        assert independent < spread, (name, independent, spread)
        assert abs(clustered / spread - 1) < abs(independent / spread - 1), (name, clustered, independent, spread)


def test_a_numerically_singular_fit_gives_no_standard_error_of_zero():
    # two nearly collinear columns: inv(J'J) comes out with a negative diagonal, which clipped to 0
    # once read as an exact parameter; it is an unidentified one
    from toolkit._calibration.fit import _uncertainty

    rng = np.random.default_rng(0)
    a = rng.normal(size=20)
    jac = np.c_[a, a * (1 + 1e-9 * rng.normal(size=20))]
    se, _, cond = _uncertainty(jac, 0.01 * rng.normal(size=20), np.array([1.0, 1.0]))
    assert cond > 1e8
    assert np.isinf(se).all()


def _drifting_profile(seed: int, pass_drift: float) -> pd.DataFrame:
    """A profile whose host runs each pass over the design a factor (sd ``pass_drift``) fast or slow,
    every wave of the pass alike, with little noise per wave (0.5%) and per request (0.2%)."""
    frame = _profile(seed, wave_noise=0.005, request_noise=0.002)
    speed = 1 + pass_drift * np.random.default_rng(1000 + seed).standard_normal(REPEATS)
    factor = frame["repeat"].map(dict(enumerate(speed)))
    for column in ("ttft_ms", "tpot_ms", "itl_ms_p50"):
        frame[column] = frame[column] * factor
    return frame


def test_a_speed_drift_between_passes_widens_the_rates_intervals(monkeypatch):
    # 5% per pass, the waves of a pass alike. In a check of 30 such runs, with the waves counted as
    # independent the prefill rate's intervals held the truth in 50% of them (standard error 0.36 of
    # the spread between runs); with the pass's drift added, in 80% (0.54 of the spread). Runs that
    # hold a parameter are left out, as above.
    import toolkit._calibration.fit as fit_module

    def fits() -> pd.DataFrame:
        out = pd.concat(
            [calibrate(_drifting_profile(seed, 0.05), MODEL, GPU, QUANT, fit=FIT) for seed in range(RUNS)],
            ignore_index=True,
        )
        return out

    with_drift = fits()
    monkeypatch.setattr(fit_module, "_drift", lambda *args: None)
    without = fits()
    kept = with_drift["held"].eq("") & without["held"].eq("")
    assert kept.sum() >= 6, with_drift["held"].tolist()
    a, b = with_drift[kept], without[kept]
    assert (a["mfu_se"].to_numpy() >= b["mfu_se"].to_numpy() * (1 - 1e-9)).all()
    assert (a["mfu_se"] > b["mfu_se"] * 1.05).mean() >= 0.5  # the drift term is not idle
    inside = (a["mfu"] - TRUTH["mfu"]).abs() <= 1.96 * a["mfu_se"]
    inside_without = (b["mfu"] - TRUTH["mfu"]).abs() <= 1.96 * b["mfu_se"]
    assert inside.mean() >= 0.75 and inside.mean() > inside_without.mean(), (inside.mean(), inside_without.mean())


def test_the_pass_drift_is_the_anova_moment_estimate():
    # two cells, two passes, one request each: wave-mean residuals [[0.02, 0.06], [-0.01, 0.05]]
    # (cell by pass). Pass effects -0.025, +0.025; interaction 0.005, -0.005, -0.005, 0.005:
    # MS_pass = 2 * (2 * 0.025^2) / 1 = 0.0025, MS_error = 4 * 0.005^2 / 1 = 1e-4,
    # sigma_p^2 = (0.0025 - 0.0001) / 2 = 0.0012. One parameter with J = 1 everywhere: B = 1/4,
    # u = (2, 2), so the variance is 0.0012 * (1/4)^2 * (4 + 4) = 0.0006.
    from toolkit._calibration.fit import _drift

    resid = np.array([0.02, 0.06, -0.01, 0.05])
    cells = np.array(["a", "a", "b", "b"])
    passes = np.array([0, 1, 0, 1])
    waves = np.array([0, 2, 1, 3])
    j = np.ones((4, 1))
    out = _drift(np.linalg.inv(j.T @ j), j, resid, waves, passes, cells)
    assert out[0, 0] == pytest.approx(0.0006)
    # a cell missing from a pass: no estimate
    assert _drift(np.eye(1), j[:3], resid[:3], waves[:3], passes[:3], cells[:3]) is None


def _speeds(seed: int, times_s: tuple[float, ...], sd: float = 0.05, memory_s: float = 60.0) -> np.ndarray:
    """The host's speed at ``times_s``: 1 plus a stationary Ornstein-Uhlenbeck drift of standard
    deviation ``sd`` whose correlation falls by e every ``memory_s`` seconds."""
    rng = np.random.default_rng(seed)
    x, last, out = sd * rng.standard_normal(), 0.0, []
    for t in times_s:
        keep = np.exp(-(t - last) / memory_s)
        x = x * keep + sd * np.sqrt(1 - keep**2) * rng.standard_normal()
        last = t
        out.append(1 + x)
    return np.array(out)


def _timed_profile(seed: int, times_s: tuple[float, ...]) -> pd.DataFrame:
    """One profile of a drifting host, its passes run at ``times_s`` (s) and combined as the report does."""
    from toolkit._sweep.profile_cells import combine_passes

    passes = []
    for k, speed in enumerate(_speeds(seed, times_s)):
        one = _profile(10 * seed + k, wave_noise=0.005, request_noise=0.002)
        one = one[one["repeat"] == 0].copy()
        for column in ("ttft_ms", "tpot_ms", "itl_ms_p50"):
            one[column] = one[column] * speed
        passes.append(one)
    return combine_passes(passes)


def test_passes_spread_over_minutes_give_intervals_that_cover_the_drift():
    # The host's speed drifts 5% with a memory of a minute. Three passes 20 s apart see nearly one
    # speed, so the pass-to-pass term finds no drift and the prefill rate's 95% interval held its
    # long-run value in 8 of 17 runs (the others held a parameter); the same passes 2 minutes apart,
    # as the report runs them between the sweep's passes, held it in 9 of 11.
    spread = _timed_profile(0, (0.0, 120.0, 240.0))
    assert spread["repeat"].tolist() == sorted(spread["repeat"]) and set(spread["repeat"]) == {0, 1, 2}
    assert spread.groupby("wave")["cell"].nunique().eq(1).all() and spread["wave"].nunique() == 3 * len(CELLS)
    coverage = {}
    for name, times in (("back to back", (0.0, 20.0, 40.0)), ("spread", (0.0, 120.0, 240.0))):
        fits = pd.concat(
            [calibrate(_timed_profile(seed, times), MODEL, GPU, QUANT, fit=FIT) for seed in range(24)],
            ignore_index=True,
        )
        kept = fits[fits["held"].eq("")]
        assert len(kept) >= 8, (name, fits["held_reason"].tolist())
        coverage[name] = float(((kept["mfu"] - TRUTH["mfu"]).abs() <= 1.96 * kept["mfu_se"]).mean())
    assert coverage["spread"] >= 0.75 and coverage["back to back"] <= 0.6, coverage


def test_a_parameter_that_fits_to_its_upper_bound_is_held_there_and_the_others_do_not_move():
    # a server whose serial_share is 1 (loads and math in turn, as on a CPU), the top of its range,
    # measured without noise: the fit sits on the bound, where a linearised standard error (here
    # zero) means nothing, so serial_share is held there with the reason, and the rest are the truth,
    # as they would not be with serial_share held at its default 0.3
    frame = _profile(0, wave_noise=0.0, request_noise=0.0, truth={**TRUTH, "serial_share": 1.0})
    row = calibrate(frame, MODEL, GPU, QUANT, fit=(*FIT, "serial_share")).iloc[0]
    assert row["held"] == "serial_share" and row["fitted"] == ",".join(FIT)
    assert row["held_reason"] == (
        "serial_share held at its upper bound 1: it fitted there, so the data say only that it is large"
    )
    assert row["serial_share"] == 1.0 and np.isnan(row["serial_share_se"])
    for name, expected in TRUTH.items():
        assert row[name] == pytest.approx(expected, rel=1e-4), name
