"""``python -m toolkit sweep``: run a concurrency sweep from the command line.

Prompts file: ``.jsonl`` with one lane per line (a JSON string, ``{"prompt": "..."}`` or
``{"messages": [...]}``), or any other text file with one prompt per non-empty line; a regular UTF-8
file of at most 256 MiB (``--system-file``: 1 MiB). The API key is
read from the environment (``--api-key-env``, default ``TOOLKIT_API_KEY``), never from the command
line, where it would land in shell history and ``ps``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from toolkit._files import read_user_text

__all__: list[str] = []

# the largest prompts file and system-prompt file read: far beyond any sweep's lanes, far below memory
MAX_PROMPTS_BYTES = 256 << 20
MAX_SYSTEM_BYTES = 1 << 20

DEFAULT_COLUMNS = [
    "in_flight",
    "wall_s",
    "speedup",
    "llm_sum_s",
    "dec_tok_s",
    "lanes_ok",
    "prefix_hit_rate",
    "ttft_p50_ms",
    "tpot_p50_ms",
    "verdict",
]


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to the ``python -m toolkit`` command line.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The parent parser's subparsers; ``sweep`` is added with ``func`` set.

    Returns
    -------
    None
    """
    p = subparsers.add_parser(
        "sweep",
        help="measure an OpenAI-compatible server at several in-flight limits (or request rates)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="server root, e.g. http://127.0.0.1:8000")
    where.add_argument("--local", action="store_true", help="start the local llama-server (Gemma-3-270M) and sweep it")
    p.add_argument("--model", help="model name (default: the first one the server lists)")
    p.add_argument("--prompts", type=Path, help="prompts file (default with --local: the built-in lane set)")
    p.add_argument("--system-file", type=Path, help="shared system prompt put before every prompt")
    p.add_argument("--lanes", type=int, default=8, help="lanes of the built-in set (--local without --prompts)")
    p.add_argument("--limits", type=_ints, default=(1, 2, 4, 8, 16, 32), help="in-flight limits, e.g. 1,2,4,8")
    p.add_argument("--rates", type=_floats, help="open-loop request rates (req/s) instead of --limits, e.g. 0.5,1,2")
    p.add_argument(
        "--arrivals", "--arrival", default="poisson", choices=("poisson", "gamma"), help="open-loop arrival process"
    )
    p.add_argument(
        "--ca2", type=float, default=1.0, help="gamma arrivals' squared coefficient of variation (1 = Poisson)"
    )
    p.add_argument("--max-in-flight", type=int, help="concurrency cap for --rates")
    p.add_argument("--max-tokens", type=int, default=256, help="output tokens asked per request (default 256)")
    p.add_argument("--attempts", type=int, default=1, help="tries per lane before it is recorded failed")
    p.add_argument("--repeats", type=int, default=1, help="times each level is run (for intervals)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="limit per request (s)")
    p.add_argument("--deadline-s", type=float, help="limit for the whole sweep (s)")
    p.add_argument("--slo-ttft-ms", type=float, help="TTFT target for goodput, ms")
    p.add_argument("--slo-tpot-ms", type=float, help="TPOT target for goodput, ms")
    p.add_argument("--metrics-url", help="Prometheus page (default: <base-url>/metrics)")
    p.add_argument("--no-metrics", action="store_true", help="do not scrape /metrics")
    p.add_argument("--no-tag-levels", "--no-tag", action="store_true", help="do not tag prompts per level")
    p.add_argument("--extra-body", type=_json_object, help="extra JSON request fields, e.g. '{\"temperature\": 0}'")
    p.add_argument("--api-key-env", default="TOOLKIT_API_KEY", help="environment variable holding the API key")
    p.add_argument(
        "--metrics-api-key-env", help="environment variable holding a key for a --metrics-url on another origin"
    )
    p.add_argument("--out-dir", "--out", type=Path, help="folder for lanes.jsonl, runs.csv, levels.csv, run.json")
    p.add_argument("--resume", action="store_true", help="continue the sweep recorded in --out-dir")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the levels (and how the sweep ended) as JSON")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    # numpy and the HTTP client load when a sweep runs, not for --help or a usage error
    from toolkit._sweep.api import run_sweep
    from toolkit._sweep.llama_server import LlamaServer
    from toolkit._sweep.prompts import lane_prompts

    system = read_user_text("--system-file", args.system_file, max_bytes=MAX_SYSTEM_BYTES) if args.system_file else None
    if args.prompts is not None:
        prompts = read_prompts(args.prompts)
    elif args.local:
        system, prompts = lane_prompts(args.lanes)
    else:
        print("--prompts is required with --base-url", file=sys.stderr)
        return 2
    metrics_url = False if args.no_metrics else args.metrics_url
    kwargs = dict(
        limits=args.limits,
        max_tokens=args.max_tokens,
        attempts=args.attempts,
        tag_levels=not args.no_tag_levels,
        metrics_url=metrics_url,
        out_dir=args.out_dir,
        resume=args.resume,
        timeout_s=args.timeout_s,
        rates=args.rates,
        arrivals=args.arrivals,
        ca2=args.ca2,
        max_in_flight=args.max_in_flight,
        slo_ttft_ms=args.slo_ttft_ms,
        slo_tpot_ms=args.slo_tpot_ms,
        repeats=args.repeats,
        deadline_s=args.deadline_s,
        system_prompt=system,
        extra_body=args.extra_body,
        api_key_env=args.api_key_env,
        progress=not args.quiet,
        metrics_api_key=os.environ.get(args.metrics_api_key_env) or None if args.metrics_api_key_env else None,
    )
    if args.local:
        with LlamaServer(parallel=max(args.limits)) as server:
            result = run_sweep(server.base_url, args.model, prompts, **kwargs)
    else:
        result = run_sweep(args.base_url, args.model, prompts, **kwargs)
    if args.json:
        levels = json.loads(result.levels.to_json(orient="records"))
        print(
            json.dumps(
                {"levels": levels, "stopped": result.stopped, "out_dir": str(args.out_dir) if args.out_dir else None}
            )
        )
    else:
        print(result.levels[[c for c in DEFAULT_COLUMNS if c in result.levels]].to_string(index=False))
    if args.out_dir is not None:
        print(f"written to {args.out_dir}", file=sys.stderr)
    if result.stopped:
        print(f"stopped early: {result.stopped}", file=sys.stderr)
        return 1
    return 0


def read_prompts(path: str | os.PathLike) -> list:
    """Lanes from a prompts file: JSON lines (string, ``prompt`` or ``messages``) or one per text line.

    The file must be a regular UTF-8 file of at most ``MAX_PROMPTS_BYTES``; anything else, and a line
    that is not JSON (or nested too deeply to parse), is a ``ValueError`` naming the file and line.
    """
    text = read_user_text("--prompts", path, max_bytes=MAX_PROMPTS_BYTES)
    if Path(path).suffix != ".jsonl":
        return [ln for ln in text.splitlines() if ln.strip()]
    prompts = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        obj = _json(line, f"{path}:{n}")
        if isinstance(obj, dict):
            obj = obj.get("messages", obj.get("prompt"))
        if obj is None:
            raise ValueError(f"{path}:{n}: expected a string, {{'prompt': ...}} or {{'messages': [...]}}")
        prompts.append(obj)
    return prompts


def _json(text: str, where: str) -> object:
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as exc:
        raise ValueError(f"{where}: not JSON ({exc})") from None


def _json_object(text: str) -> dict:
    try:
        obj = _json(text, "--extra-body")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError(f"--extra-body must be a JSON object, got {type(obj).__name__}")
    return obj


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
