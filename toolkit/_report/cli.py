"""The ``report`` subcommand of ``python -m toolkit``."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

__all__: list[str] = []


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``report`` to the ``python -m toolkit`` command line.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The parent parser's subparsers; ``report`` is added with ``func`` set.

    Returns
    -------
    None
    """
    p = subparsers.add_parser(
        "report",
        help="measure a server (default: the local llama-server) and write reports/<date>-<name>/",
        description="Measure a server (env BASE_URL / MODEL; default: start the local llama-server with"
        " Gemma-3-270M), draw it beside the reference vLLM run, execute the notebooks and write a"
        " self-contained HTML report with PNG/SVG charts and CSV tables. API key: env TOOLKIT_API_KEY.",
    )
    p.add_argument("--base-url", help="server to measure (default: env BASE_URL, else local llama-server)")
    p.add_argument("--model", help="model name the server expects (default: env MODEL)")
    p.add_argument("--name", help="report name (default: from the model)")
    p.add_argument("--out-dir", "--out", type=Path, help="report folder (default: reports/<date>-<name>)")
    p.add_argument(
        "--recorded", action="store_true", help="draw the recorded run shipped with the package, measure nothing"
    )
    p.add_argument(
        "--run",
        type=Path,
        help="draw a run read from this file or folder (vLLM bench, GuideLLM, AIPerf,"
        " inference-perf, a sweep), measure nothing",
    )
    p.add_argument("--no-notebooks", action="store_true", help="do not execute the notebooks")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the report's paths, its conclusion and the seconds of each phase (phase_s) as JSON",
    )
    p.set_defaults(func=_cli)
    _extend_compare(subparsers)


def _extend_compare(subparsers: argparse._SubParsersAction) -> None:
    """Give ``compare`` the ``--html OUT.html`` option: the comparison also as a self-contained page with
    both runs on one chart (drawn here, since the chart belongs to the report layer)."""
    compare = subparsers.choices.get("compare")
    if compare is None:
        return
    compare.add_argument("--html", type=Path, help="also write the comparison as a self-contained HTML page")
    text_func = compare.get_default("func")

    def func(args: argparse.Namespace) -> int:
        if args.html is None:
            return text_func(args)
        from toolkit._interop.cli import _compare_and_print
        from toolkit._report.compare_chart import _compare_page

        result = _compare_and_print(args)
        page = _compare_page(result, name_a=str(args.a), name_b=str(args.b))
        args.html.write_text(page, encoding="utf-8")
        return 0

    compare.set_defaults(func=func)


def _cli(args: argparse.Namespace) -> int:
    # pandas, altair and the rest load when a report is built
    from toolkit._report.build import TIMING_FILE, build_report

    index = build_report(
        out_dir=args.out_dir,
        base_url=args.base_url,
        model=args.model,
        name=args.name,
        recorded=args.recorded,
        run=args.run,
        execute_notebooks=not args.no_notebooks,
        progress=not args.quiet,
    )
    if args.json:
        summary = (index.parent / "conclusion.txt").read_text(encoding="utf-8").strip()
        report = {"index": str(index), "folder": str(index.parent), "conclusion": summary}
        timing = index.parent / TIMING_FILE
        if timing.is_file():
            rows = csv.DictReader(timing.read_text(encoding="utf-8").splitlines())
            report["phase_s"] = {row["phase"]: float(row["seconds"]) for row in rows}
        print(json.dumps(report))
    else:
        print(index)
    return 0
