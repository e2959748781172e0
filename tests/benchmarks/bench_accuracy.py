"""Benchmark: the default serving model (no calibration) against published measurements, dev and holdout.

Runs :func:`toolkit.accuracy_against_published` on every row of data/published_measurements.csv and
writes reports/bench/accuracy.json (median |error| overall and per family, p90, each with its 95%
interval, row counts, per split, with the date, issue 17's targets and whether each split meets them) and reports/bench/accuracy.png (predicted against measured, log-log, per family).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import toolkit  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "reports" / "bench"


# issue 17: median |error| under 10% overall and in every family, p90 TTFT |error| under 50%
TARGET_MEDIAN = 0.10
TARGET_TTFT_P90 = 0.50


def _met(part) -> bool:
    """Whether one split's summary meets both targets."""
    ttft = part[part["family"] == "ttft"]["p90_abs_err"]
    return bool((part["median_abs_err"] < TARGET_MEDIAN).all() and (ttft < TARGET_TTFT_P90).all())


def main() -> dict:
    """Run, write the JSON and PNG, print one line per split and family; return the JSON's dict."""
    accuracy = toolkit.accuracy_against_published()
    summary = toolkit.accuracy_summary(accuracy)
    result = {
        "date": datetime.date.today().isoformat(),
        "rows": int(len(accuracy)),
        "splits": {
            split: {
                row["family"]: {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}
                for row in part.drop(columns="split").to_dict("records")
            }
            for split, part in summary.groupby("split")
        },
        "below_floor": accuracy.loc[accuracy["below_floor"], "id"].tolist(),
        "targets": {"median_abs_err": TARGET_MEDIAN, "ttft_p90_abs_err": TARGET_TTFT_P90},
        "met": {split: _met(part) for split, part in summary.groupby("split")},
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "accuracy.json").write_text(json.dumps(result, indent=2) + "\n")
    families = sorted(accuracy["family"].unique())
    fig, axes = plt.subplots(1, len(families), figsize=(4 * len(families), 4))
    for ax, family in zip(np.atleast_1d(axes), families, strict=True):
        part = accuracy[(accuracy["family"] == family) & accuracy["predicted"].notna()]
        for split, marker in (("dev", "o"), ("holdout", "^")):
            rows = part[part["split"] == split]
            ax.scatter(rows["measured"], rows["predicted"], marker=marker, s=14, label=split, alpha=0.7)
        lo, hi = part[["measured", "predicted"]].min().min(), part[["measured", "predicted"]].max().max()
        ax.plot([lo, hi], [lo, hi], color="grey", linestyle="--", linewidth=1)
        ax.set(xscale="log", yscale="log", xlabel="measured", ylabel="predicted", title=family)
        ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "accuracy.png", dpi=100)
    for row in summary.itertuples():
        print(
            f"{row.split:8s} {row.family:11s} rows {row.rows:4d}  median |err| {row.median_abs_err:6.1%}"
            f" ({row.median_abs_err_low:.1%}-{row.median_abs_err_high:.1%})  p90 {row.p90_abs_err:6.1%}"
            f" ({row.p90_abs_err_low:.1%}-{row.p90_abs_err_high:.1%})"
        )
    return result


if __name__ == "__main__":
    main()
