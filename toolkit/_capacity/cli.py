"""``python -m toolkit capacity``: the highest request rate within latency SLOs, measured and/or predicted.

Measured (``--base-url URL`` or ``--local``, the local llama-server): an open-loop search of the
server, as :func:`toolkit.find_capacity`. Predicted (``--predict --model-name M --gpu G --quant Q``):
the same search on the simulator, as :func:`toolkit.predict_capacity`. Both may be asked at once. The
API key is read from the environment (``--api-key-env``), never from the command line. Exit status 1
when the measured search ran out of its ``--budget-s`` before it finished.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__: list[str] = []

STEP_COLUMNS = ["phase", "rate_rps", "requests", "achieved_rps", "goodput_rps", "stable", "passed", "reason"]


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``capacity`` to the ``python -m toolkit`` command line.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The parent parser's subparsers; ``capacity`` is added with ``func`` set.

    Returns
    -------
    None
    """
    p = subparsers.add_parser(
        "capacity",
        help="the highest open-loop request rate a server sustains within latency SLOs (measured or predicted)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--base-url", help="server root to measure, e.g. http://127.0.0.1:8000")
    where.add_argument("--local", action="store_true", help="measure the local llama-server (started and stopped)")
    p.add_argument("--model", help="model name sent to the server (default: the first one it lists)")
    p.add_argument("--predict", action="store_true", help="predict with the serving model and the simulator")
    p.add_argument("--model-name", help="catalog model for --predict")
    p.add_argument("--gpu", help="catalog GPU for --predict")
    p.add_argument("--quant", help="weight format for --predict")
    p.add_argument("--backend", help="serving engine for --predict (its batch cap and memory reserve)")
    p.add_argument("--max-batch", type=int, default=256, help="most sequences running at once, --predict")
    p.add_argument("--slo-ttft-ms", type=float, help="time-to-first-token target at --percentile, ms")
    p.add_argument("--slo-tpot-ms", type=float, help="time-per-output-token target at --percentile, ms")
    p.add_argument("--slo-e2e-ms", type=float, help="end-to-end latency target at --percentile, ms")
    p.add_argument("--percentile", type=float, default=99.0, help="percentile of the SLOs, 50 to 99.99 (default 99)")
    p.add_argument("--prompt-tokens", type=int, help="prompt tokens per request (default 128 without --trace)")
    p.add_argument("--output-tokens", type=int, help="output tokens per request (default 64 without --trace)")
    p.add_argument("--trace", help="a shipped trace name or a CSV/Parquet file whose lengths and bursts are replayed")
    p.add_argument("--arrivals", default="poisson", choices=("poisson", "gamma"), help="open-loop arrival process")
    p.add_argument("--ca2", type=float, default=1.0, help="gamma arrivals' squared coefficient of variation")
    p.add_argument("--min-requests", type=int, help="measured requests per step (default: the percentile's rule)")
    p.add_argument("--budget-s", type=float, default=1800.0, help="limit on the measured search, s (default 1800)")
    p.add_argument("--rate-low-rps", type=float, default=1.0, help="first rate tried, req/s (default 1)")
    p.add_argument("--rate-high-rps", type=float, help="highest rate tried, req/s (default: double until a failure)")
    p.add_argument("--rel-tolerance", type=float, help="bisection stops within this fraction (0.1; 0.02 predicted)")
    p.add_argument("--repeats", type=int, default=2, help="steps the last passing rate must pass (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of arrivals and lengths")
    p.add_argument("--api-key-env", default="TOOLKIT_API_KEY", help="environment variable holding the API key")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print summaries, steps and warnings as JSON")
    p.set_defaults(func=_run)


def _search_args(args: argparse.Namespace) -> dict[str, Any]:
    trace = None
    if args.trace is not None:
        from toolkit._workload.traces import load_trace

        trace = load_trace(args.trace)
    out = dict(
        slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms, slo_e2e_ms=args.slo_e2e_ms,
        percentile=args.percentile, prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
        trace=trace, arrivals=args.arrivals, ca2=args.ca2, min_requests=args.min_requests,
        rate_low_rps=args.rate_low_rps, rate_high_rps=args.rate_high_rps, repeats=args.repeats, seed=args.seed,
    )  # fmt: skip
    if args.rel_tolerance is not None:
        out["rel_tolerance"] = args.rel_tolerance
    return out


def _run(args: argparse.Namespace) -> int:
    from toolkit._capacity.measure import find_capacity
    from toolkit._capacity.predict import predict_capacity

    measuring = args.local or args.base_url is not None
    if not measuring and not args.predict:
        raise ValueError("give --base-url URL or --local to measure, and/or --predict to predict")
    if args.predict:
        missing = [f"--{n}" for n in ("model-name", "gpu", "quant") if getattr(args, n.replace("-", "_")) is None]
        if missing:
            raise ValueError(f"--predict needs {', '.join(missing)}")
    search = _search_args(args)
    results = {}
    if args.predict:
        results["predicted"] = predict_capacity(
            args.model_name, args.gpu, args.quant, backend=args.backend, max_batch=args.max_batch, **search
        )
    if measuring:
        results["measured"] = find_capacity(
            args.base_url, args.model, budget_s=args.budget_s, api_key_env=args.api_key_env,
            progress=not args.quiet, **search,
        )  # fmt: skip
    if args.json:
        print(json.dumps({name: _as_json(r) for name, r in results.items()}))
    else:
        for name, r in results.items():
            print(f"{name}: {r!r}")
            print(r.steps[[c for c in STEP_COLUMNS if c in r.steps]].to_string(index=False))
            for warning in r.warnings:
                print(f"warning: {warning}", file=sys.stderr)
    measured = results.get("measured")
    return 1 if measured is not None and bool(measured.summary["stopped_early"].iloc[0]) else 0


def _as_json(result: Any) -> dict[str, Any]:
    return {
        "summary": json.loads(result.summary.to_json(orient="records"))[0],
        "steps": json.loads(result.steps.to_json(orient="records")),
        "warnings": list(result.warnings),
    }
