"""The ``compare`` subcommand of ``python -m toolkit``."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__: list[str] = []


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``compare`` to the ``python -m toolkit`` command line.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The parent parser's subparsers; ``compare`` is added with ``func`` set.

    Returns
    -------
    None
    """
    p = subparsers.add_parser(
        "compare",
        help="compare two runs (vLLM bench, GuideLLM, AIPerf, inference-perf or toolkit sweep) level by level",
        description="Read two runs, list the conditions that differ, then per level the difference of each metric"
        " (B - A) with a confidence interval from the runs' own requests or repeats, flagging those beyond the noise.",
    )
    p.add_argument("a", type=Path, help="the baseline run: a result file or a sweep folder")
    p.add_argument("b", type=Path, help="the run compared with it")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence level of the intervals (0.5-0.999)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples per metric (100-100000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--all", action="store_true", help="print every level metric, not only the flagged ones")
    p.add_argument("--csv", type=Path, help="also write every level metric to this CSV file")
    p.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    from toolkit._interop.compare import compare_runs  # pandas and scipy load when a comparison runs

    result = compare_runs(args.a, args.b, confidence=args.confidence, n_resamples=args.resamples, seed=args.seed)
    print(result.to_text())
    if args.all:
        print(result.metrics.to_string(index=False))
    if args.csv is not None:
        result.metrics.to_csv(args.csv, index=False)
    return 0
