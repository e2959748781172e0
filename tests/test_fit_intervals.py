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


def _profile(seed: int, wave_noise: float = 0.02, request_noise: float = 0.005) -> pd.DataFrame:
    """A profile frame whose step times and TTFTs follow the documented observation model exactly,
    times a factor per wave and a smaller one per request."""
    cm = cost_model(MODEL, GPU, QUANT, **TRUTH)
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
