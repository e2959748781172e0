"""Benchmark: does the sweep's verdict interval hold from one server run to the next?

Starts the local llama-server ``INSTANCES`` times (each a run, as ``make report`` starts its own) and
sweeps each twice with the report's settings (``LOCAL_SWEEP``: 8 lanes, limits 1, 2, 4, 8, two
passes over every level back to back, about 4 minutes a run), combining the passes as the report
does (:func:`toolkit._sweep.result.combine_passes`). Writes reports/bench/verdict.json:

- each run's per-pass elasticities, its levels' elasticity, 95% half-width (``elasticity_ci95``,
  :mod:`toolkit._sweep.verdict_interval`) and verdict, the host load and other processes' CPU share;
- Cochran's Q per level over the runs, weighting each by its own interval (its standard error
  ``elasticity_ci95 / t(0.975, df)``): about its degrees of freedom (runs - 1) when the runs
  disagree only as much as their intervals say, far above when the intervals are too narrow;
- leave-one-out coverage: how often a run's interval holds the other runs' mean elasticity;
- over every pair of runs, how many give the same verdicts and how many contradict (both decided,
  differently).

Results from a busy host (other processes above 25% of the CPU) are marked as such.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "reports" / "bench"
INSTANCES = 4


def pass_elasticities(out: Path) -> list[dict]:
    """Each pass's own elasticities by in-flight limit (None where unknown) from the pass folders a
    report-style sweep wrote under ``out/sweep``: the spread the verdict's interval is made of."""
    passes = [pd.read_csv(path) for path in sorted((out / "sweep").glob("pass*/runs.csv"))]
    return [
        {str(int(k)): (None if pd.isna(e) else round(float(e), 6)) for k, e in zip(p["in_flight"], p["elasticity"])}
        for p in passes
    ]


def _one_run() -> dict:
    from toolkit._report.measure import LOCAL_SWEEP, _measure
    from toolkit._sweep.llama_server import LlamaServer

    started = dt.datetime.now().isoformat(timespec="seconds")
    load_before = os.getloadavg()[0]
    with LlamaServer(parallel=LOCAL_SWEEP["lanes"]) as server, tempfile.TemporaryDirectory() as tmp:
        # the report's sweep, its passes back to back (nothing between them)
        run = _measure(
            server.base_url,
            Path(tmp),
            LOCAL_SWEEP,
            "bench_verdict",
            server_pid=server.pid,
            between=lambda: None,
        )
        per_pass = pass_elasticities(Path(tmp))
    combined = run.levels[run.levels["in_flight"] > 1]
    levels = combined["in_flight"].astype(int).astype(str).tolist()
    return {
        "started": started,
        "load_1m_before": round(load_before, 2),
        "other_cpu_share": round(run.others["sweep"], 4),
        "busy": "warning" in run.conditions,
        "elasticity_per_pass": per_pass,
        "elasticity": dict(zip(levels, combined["elasticity"].round(4).tolist())),
        "elasticity_ci95": dict(zip(levels, combined["elasticity_ci95"].round(4).tolist())),
        "df": int((len(per_pass) - 1) * len(levels)),
        "verdicts": dict(zip(levels, combined["verdict"].tolist())),
    }


def summarize(runs: list[dict]) -> dict:
    """Cochran's Q per level, leave-one-out coverage and pair agreement over ``runs`` (module docstring)."""
    from toolkit._sweep.verdict_interval import cochran_q

    levels = list(runs[0]["elasticity"])
    e = np.array([[r["elasticity"][k] for k in levels] for r in runs])
    half = np.array([[r["elasticity_ci95"][k] for k in levels] for r in runs])
    se = half / stats.t.ppf(0.975, np.array([[r["df"]] for r in runs]))
    q = np.array([cochran_q(e[:, j], se[:, j])[0] for j in range(len(levels))])
    others = (e.sum(axis=0) - e) / (len(runs) - 1)
    covered = np.abs(e - others) <= half
    pairs = list(itertools.combinations(runs, 2))
    decided = ("batching", "mixed", "queueing")
    contradicting = sum(
        any(
            a["verdicts"][k] in decided and b["verdicts"][k] in decided and a["verdicts"][k] != b["verdicts"][k]
            for k in levels
        )
        for a, b in pairs
    )
    return {
        "cochran_q": dict(zip(levels, q.round(2).tolist())),
        "q_degrees_of_freedom": len(runs) - 1,
        "q_p_value": dict(zip(levels, stats.chi2.sf(q, len(runs) - 1).round(3).tolist())),
        "leave_one_out_coverage": round(float(covered.mean()), 3),
        "pairs": len(pairs),
        "pairs_same_verdicts": sum(a["verdicts"] == b["verdicts"] for a, b in pairs),
        "pairs_contradicting": contradicting,
    }


def main() -> dict:
    runs = [_one_run() for _ in range(INSTANCES)]
    result = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "busy_runs": sum(r["busy"] for r in runs),
        **summarize(runs),
        "runs": runs,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "verdict.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{len(runs)} runs ({result['busy_runs']} busy): Q {result['cochran_q']} on {result['q_degrees_of_freedom']} df;"
        f" leave-one-out coverage {result['leave_one_out_coverage']:.0%}; pairs with the same verdicts"
        f" {result['pairs_same_verdicts']}/{result['pairs']}, contradicting {result['pairs_contradicting']}"
    )
    for r in runs:
        print(r["started"], r["verdicts"], r["elasticity"], r["elasticity_ci95"])
    return result


if __name__ == "__main__":
    main()
