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
    _extend_plan(subparsers)


def _extend_plan(subparsers: argparse._SubParsersAction) -> None:
    """Give ``plan`` the ``--launch ENGINE`` option: the cheapest plan meeting the SLOs as that engine's
    launch command (or, with ``--launch-kubernetes``, its Deployment) instead of the table."""
    plan = subparsers.choices.get("plan")
    if plan is None:
        return
    plan.add_argument(
        "--launch",
        choices=("vllm", "sglang", "llamacpp"),
        help="print the cheapest plan meeting the SLOs as this engine's launch command (restrict --backend to it)",
    )
    plan.add_argument(
        "--launch-kubernetes", action="store_true", help="with --launch: a Kubernetes Deployment (YAML) instead"
    )
    table_func = plan.get_default("func")

    def func(args: argparse.Namespace) -> int:
        if not args.launch:
            return table_func(args)
        from toolkit._interop.launch import launch_config
        from toolkit._planning.cli import _question
        from toolkit._planning.planner import plan as make_plan

        table = make_plan(**_question(args))
        table = table[table["meets_slo"] & (table["backend"] == args.launch)]
        if table.empty:
            raise ValueError(f"no plan served by {args.launch} meets the SLOs (see the table without --launch)")
        print(launch_config(table.iloc[0], engine=args.launch, kubernetes=args.launch_kubernetes), end="\n")
        return 0

    plan.set_defaults(func=func)


def _cli(args: argparse.Namespace) -> int:
    _compare_and_print(args)
    return 0


def _compare_and_print(args: argparse.Namespace):
    """Compare ``args.a`` with ``args.b``, print the comparison (and write ``--csv``), and return it, so that
    the report layer's ``--html`` can draw the same comparison."""
    from toolkit._interop.compare import compare_runs  # pandas and scipy load when a comparison runs

    result = compare_runs(args.a, args.b, confidence=args.confidence, n_resamples=args.resamples, seed=args.seed)
    print(result.to_text())
    if args.all:
        print(result.metrics.to_string(index=False))
    if args.csv is not None:
        result.metrics.to_csv(args.csv, index=False)
    return result
