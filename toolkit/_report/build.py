"""The benchmark report: measure a server (or read a recorded run), draw it, write one HTML folder.

``build_report`` writes ``reports/<date>-<name>/`` with ``index.html`` (self-contained: the Vega,
Vega-Lite and Vega-Embed scripts are inlined, nothing is fetched), every chart as PNG and SVG, every
table as CSV and the executed notebooks. Strings that came from a server or a user (model names,
error texts, URLs) are escaped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import os
import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import altair as alt
import numpy as np
import pandas as pd

from toolkit._data import load_csv
from toolkit._report import charts as _charts

__all__ = ["build_report"]

# A checkout's folders: the defaults of ``notebook_dir`` and ``reports_dir`` (the working directory's).
NOTEBOOK_DIR = Path("notebooks")
REPORTS_DIR = Path("reports")
REFERENCE_CSV = "reference_vllm_sweep_32_lanes.csv"
# environment variables the notebooks read their parameters from
NOTEBOOK_ENV = {"base_url": "TOOLKIT_BASE_URL", "model": "TOOLKIT_MODEL", "sweep_dir": "TOOLKIT_SWEEP_DIR"}
# The serving-model section predicts the reference run's hardware: an 8B bf16 model (Llama-3.1-8B's
# geometry standing in for Bonsai-8B) on one RTX PRO 6000 Blackwell, at 2,048 tokens of context.
REFERENCE_SETUP = {"model": "Llama-3.1-8B", "gpu": "RTX PRO 6000 Blackwell", "quant": "bf16", "context_tokens": 2048}
# The queueing section: utilisations of the closed-form lines, requests per simulated cell (enough
# for a few per cent of sampling error below utilisation 0.9, and a few seconds of CPU).
QUEUE_UTILIZATIONS = np.linspace(0.05, 0.97, 47)
QUEUE_SIM_REQUESTS = 200_000
# The capacity question of notebook 01: Llama-3.1-8B at 3 req/s, 512 tokens in, 128 out, p95 under 5 s.
FRONTIER_QUESTION = {
    "request_rate": 3,
    "prompt_tokens": 512,
    "output_tokens": 128,
    "slo_e2e_ms": 5000,
    "models": "Llama-3.1-8B",
    "backends": ("vllm", "ollama"),
    "tensor_parallel": (1, 2),
}
# The local sweep matches the recorded one (data/llamacpp_sweep_gemma3_270m_conditions.csv): about
# two minutes on 2 cores.
LOCAL_SWEEP = {"lanes": 8, "limits": (1, 2, 4, 8), "max_tokens": 128}
RECORDED_CONDITIONS = "llamacpp_sweep_gemma3_270m_conditions.csv"
RECORDED_SHOWN = (
    "date",
    "cpu_model",
    "cpu_cores",
    "load_average_1min_before",
    "llama_server_version",
    "server_command",
    "model",
    "lanes",
    "limits",
    "max_tokens",
    "temperature",
)
REMOTE_SWEEP = {"lanes": 32, "limits": (1, 2, 4, 8, 16, 32), "max_tokens": 256}


@dataclass
class _Run:
    """One measured (or recorded) sweep and how it was obtained."""

    levels: pd.DataFrame
    lanes: pd.DataFrame | None
    label: str
    conditions: dict[str, str] = field(default_factory=dict)
    # the machine a local Gemma-3-270M llama-server ran on (a measure_host() row): set only for runs
    # the serving model can predict, which get the predicted-against-measured section
    host: pd.DataFrame | None = None


def build_report(
    out_dir: str | Path | None = None,
    base_url: str | None = None,
    model: str | None = None,
    name: str | None = None,
    *,
    recorded: bool = False,
    execute_notebooks: bool = True,
    api_key: str | None = None,
) -> Path:
    """Measure a server, draw the results beside the reference run, and write the HTML report.

    Three sources, in this order: ``base_url`` (or env ``BASE_URL``) measures that
    OpenAI-compatible server with the full 32-lane sweep at in-flight limits 1..32; ``recorded=True``
    reads the llama-server run recorded under ``data/``; otherwise the local llama-server is started
    with the embedded Gemma-3-270M model and swept with 8 lanes at limits 1, 2, 4, 8.

    Parameters
    ----------
    out_dir : str or pathlib.Path, optional
        Report folder; default ``reports/<YYYY-MM-DD>-<name>``.
    base_url : str, optional
        Server root (``http://host:port``); env ``BASE_URL`` when omitted.
    model : str, optional
        Model name the server expects; env ``MODEL`` when omitted; None takes the first model the
        server lists.
    name : str, optional
        Report name used in the folder name; derived from the model when omitted.
    recorded : bool
        Draw the recorded run in ``data/`` instead of measuring (no server needed).
    execute_notebooks : bool
        Execute ``notebooks/*.ipynb`` against the same run and keep them in the folder.
    api_key : str, optional
        Bearer token for ``base_url`` (default: env ``TOOLKIT_API_KEY``); never written anywhere.

    Returns
    -------
    pathlib.Path
        The ``index.html`` written. Beside it: ``<chart>.png`` / ``<chart>.svg`` per chart,
        ``levels.csv`` (one row per in-flight limit, the columns of ``SweepResult.levels``: wall_s in
        s, dec_tok_s in tokens/s, ...), ``lanes.csv`` (one row per lane attempt) where measured,
        ``reference_levels.csv``, ``batching_curve.csv``, ``queueing.csv``, ``frontier.csv``,
        ``accuracy.csv`` where calibration is available, and ``notebooks/*.ipynb`` executed.
    """
    base_url = base_url or os.environ.get("BASE_URL") or None
    model = model or os.environ.get("MODEL") or None
    if base_url:
        default_name = _slug(model or urlsplit(base_url).hostname or "server")
    else:
        default_name = "recorded-llama-server" if recorded else "llama-server-gemma3-270m"
    name = name or default_name
    out = Path(out_dir) if out_dir is not None else REPORTS_DIR / f"{dt.date.today().isoformat()}-{_slug(name)}"
    out.mkdir(parents=True, exist_ok=True)
    if base_url:
        run = _measure(base_url, model, api_key, out, REMOTE_SWEEP, f"{model or 'server'} at {_display_url(base_url)}")
    elif recorded:
        run = _recorded_run()
    else:
        run = _measure_local(out)
    run.levels.to_csv(out / "levels.csv", index=False)
    if run.lanes is not None:
        run.lanes.to_csv(out / "lanes.csv", index=False)
    sections = _sections(run, out)
    if execute_notebooks:
        sections.append(_notebook_section(out, base_url, model))
    index = out / "index.html"
    index.write_text(_page(f"Serving capacity report: {name}", run, sections), encoding="utf-8")
    return index


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
    p.add_argument("--out", type=Path, help="report folder (default: reports/<date>-<name>)")
    p.add_argument("--recorded", action="store_true", help="draw the recorded run in data/, measure nothing")
    p.add_argument("--no-notebooks", action="store_true", help="do not execute the notebooks")
    p.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    index = build_report(
        out_dir=args.out,
        base_url=args.base_url,
        model=args.model,
        name=args.name,
        recorded=args.recorded,
        execute_notebooks=not args.no_notebooks,
    )
    print(index)
    return 0


# --- where the run comes from ----------------------------------------------------------------


async def notebook_levels(
    base_url: str | None = None, model: str | None = None, sweep_dir: str | Path | None = None
) -> tuple[pd.DataFrame, str]:
    """The sweep levels a notebook draws, and their label: a folder's, a fresh sweep's or the recorded run's.

    Parameters
    ----------
    base_url : str, optional
        A server to sweep now (8 lanes, limits 1, 2, 4, 8, 128 output tokens) when no ``sweep_dir``.
    model : str, optional
        Model name the server expects (None: the first ``/v1/models`` lists).
    sweep_dir : str or pathlib.Path, optional
        A folder holding a sweep's ``levels.csv`` (a sweep's ``out_dir`` or a report folder); wins
        over ``base_url``.

    Returns
    -------
    tuple of (pandas.DataFrame, str)
        ``SweepResult.levels`` columns (``in_flight``, ``wall_s`` in s, ``dec_tok_s`` in tokens/s,
        ...) and a label naming the run. With neither argument: the recorded llama-server run.
    """
    if sweep_dir:
        return pd.read_csv(Path(sweep_dir) / "levels.csv", comment="#"), f"the run in {Path(sweep_dir).name}"
    if base_url:
        from toolkit._sweep.api import sweep
        from toolkit._sweep.prompts import lane_prompts

        system_prompt, prompts = lane_prompts(LOCAL_SWEEP["lanes"])
        result = await sweep(
            base_url,
            model,
            prompts,
            limits=LOCAL_SWEEP["limits"],
            max_tokens=LOCAL_SWEEP["max_tokens"],
            system_prompt=system_prompt,
        )
        return result.levels, f"{result.params.get('model', model)} at {_display_url(base_url)}"
    run = _recorded_run()
    return run.levels, run.label


def _recorded_run() -> _Run:
    """The llama-server sweep recorded under ``data/`` (by the sweep harness, with its host)."""
    from toolkit._validation.closed_loop import RECORDED_HOST, RECORDED_LANES, RECORDED_LEVELS

    recorded = load_csv(RECORDED_CONDITIONS).set_index("key")["value"]
    conditions = {"source": f"the run recorded in data/{RECORDED_LEVELS}; no server was started"}
    conditions.update({key: str(recorded[key]) for key in RECORDED_SHOWN if key in recorded.index})
    levels = load_csv(RECORDED_LEVELS).drop(columns=["source"], errors="ignore")
    label = "llama-server, Gemma-3-270M (recorded)"
    return _Run(levels, load_csv(RECORDED_LANES), label, conditions, host=load_csv(RECORDED_HOST))


def _measure_local(out: Path) -> _Run:
    from toolkit._model.host import measure_host
    from toolkit._sweep.llama_server import LlamaServer, server_version

    host = measure_host()  # before the server starts, so nothing competes with the measurement
    label = "llama-server, Gemma-3-270M (this machine)"
    with LlamaServer(parallel=LOCAL_SWEEP["lanes"]) as server:
        run = _measure(server.base_url, None, None, out, LOCAL_SWEEP, label)
    run.conditions["server"] = f"llama.cpp llama-server ({server_version()}), --parallel {server.parallel}"
    run.host = host
    return run


def _measure(base_url: str, model: str | None, api_key: str | None, out: Path, settings: dict, label: str) -> _Run:
    """Sweep ``base_url`` with the standard lane set; the sweep's own files go to ``out/sweep``."""
    from toolkit._sweep.api import run_sweep
    from toolkit._sweep.prompts import lane_prompts

    system_prompt, prompts = lane_prompts(settings["lanes"])
    started = dt.datetime.now().isoformat(timespec="seconds")
    result = run_sweep(
        base_url,
        model,
        prompts,
        limits=settings["limits"],
        max_tokens=settings["max_tokens"],
        system_prompt=system_prompt,
        api_key=api_key,
        out_dir=out / "sweep",
    )
    conditions = {
        "source": f"measured {started}" + (f" (stopped early: {result.stopped})" if result.stopped else ""),
        "server": _display_url(base_url),
        "model": str(result.params.get("model", model)),
        "sweep": f"{settings['lanes']} lanes at in-flight limits {', '.join(map(str, settings['limits']))},"
        f" max {settings['max_tokens']} output tokens, prompts from toolkit._sweep.prompts",
    }
    return _Run(result.levels, result.lanes, label, conditions)


def _display_url(url: str) -> str:
    """``url`` without any user:password part."""
    parts = urlsplit(url)
    if not parts.hostname:
        return url
    return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))


# --- report sections -------------------------------------------------------------------------


@dataclass
class _Section:
    title: str
    body: str  # HTML, already escaped


def _sections(run: _Run, out: Path) -> list[_Section]:
    reference = load_csv(REFERENCE_CSV)
    ref_label = "vLLM, Bonsai-8B, RTX PRO 6000 (reference)"
    reference.to_csv(out / "reference_levels.csv", index=False)
    throughput = _charts.decode_throughput_chart(run.levels, reference, label=run.label, reference_label=ref_label)
    decomposition = _charts.decomposition_chart(run.levels, reference, label=run.label, reference_label=ref_label)
    lanes = "" if run.lanes is None else _table_html(run.lanes, f"Lane attempts: {run.label}", "lanes.csv")
    sections = [
        _Section(
            "Decode throughput against concurrency",
            stat_tiles(run.levels)
            + _chart_html(throughput, "decode_throughput", out)
            + "<p>Output tokens per second of wall clock at each in-flight limit, the same lanes at"
            " every limit. Beside it, the reference run this chart reproduces (its own y scale); its"
            " 2-lane column is a measured dip, a level whose lanes spent their retry budgets and"
            " generated twice the output tokens of the others.</p>",
        ),
        _Section(
            "Where the time goes",
            _chart_html(decomposition, "decomposition", out)
            + "<p>Summed lane time flat across limits means the server batches the lanes; growing"
            " with the limit means it queues them. Slot wait is the serialized post-processing.</p><ul>"
            + f"<li><b>{html.escape(run.label)}</b>: {html.escape(decomposition_note(run.levels))}</li>"
            + f"<li><b>{html.escape(ref_label)}</b>: {html.escape(decomposition_note(reference))}</li>"
            + "</ul>"
            + _table_html(run.levels, f"Measured levels: {run.label}", "levels.csv")
            + lanes
            + _table_html(reference, f"Reference levels: {ref_label}", "reference_levels.csv"),
        ),
    ]
    if run.host is not None and run.lanes is not None:
        sections.append(_accuracy_section(run, out))
    return sections + [_batching_section(reference, out), _queueing_section(out), _frontier_section(out)]


def _accuracy_section(run: _Run, out: Path) -> _Section:
    """Predicted against measured for the Gemma run: uncalibrated, then calibrated on some levels."""
    from toolkit._validation.closed_loop import FIT_LIMITS, llamacpp_closed_loop_check, summarize_errors

    table = llamacpp_closed_loop_check((run.lanes, run.levels), gpu=run.host)
    table.to_csv(out / "accuracy.csv", index=False)
    summary = summarize_errors(table)
    fitted = table.attrs["calibration"]
    fitted_names = ("mbu", "mfu", "step_overhead_ms", "request_overhead_ms")
    params = ", ".join(f"{k} {float(fitted[k].iloc[0]):.3g}" for k in fitted_names)
    return _Section(
        "Predicted against measured",
        _chart_html(_charts._accuracy_chart(table), "accuracy", out)
        + "<p>The serving model predicts each level of this run (simulator, one request per lane, the"
        " lanes' own token counts) from the host's measured bandwidth and matrix rate, first with the"
        f" default efficiencies, then calibrated on limits {', '.join(map(str, FIT_LIMITS))} and checked on"
        f" the others (fitted: {html.escape(params)}).</p>"
        + _table_html(summary, "Median and largest absolute relative error", "accuracy.csv", open_=True)
        + _table_html(table, "Every level and metric", "accuracy.csv"),
    )


def _queueing_section(out: Path) -> _Section:
    from toolkit._queueing.closed_forms import queue_wait, workload_presets
    from toolkit._queueing.wait_check import compare_wait_models

    presets = workload_presets()
    with warnings.catch_warnings():  # the tail warning is what this section shows, in numbers
        warnings.simplefilter("ignore")
        closed = queue_wait(
            arrival_rate=QUEUE_UTILIZATIONS[:, None], service_time_s=1.0, cs2=presets["cs2"].to_numpy()[None, :]
        )
    table = compare_wait_models(num_requests=QUEUE_SIM_REQUESTS, replications=4)
    table.to_csv(out / "queueing.csv", index=False)
    worst = table.loc[table["rel_err"].idxmin()]
    errors = table.pivot_table(index="utilization", columns=["cs2", "distribution"], values="rel_err")
    errors = errors.map(lambda v: f"{v:+.0%}")
    errors.columns = [f"cs2 {c:g} {d}" for c, d in errors.columns]
    return _Section(
        "Queueing: where the closed form holds",
        _chart_html(_charts.queueing_chart(closed, table), "queueing", out)
        + "<p>One FIFO server, Poisson arrivals, mean service 1 s: the p95 wait of the closed form"
        " (Pollaczek-Khinchine / Kingman with the exponential tail) against simulated queues of"
        f" {QUEUE_SIM_REQUESTS:,} requests per cell. Its largest under-estimate here:"
        f" {-worst['rel_err']:.0%} at utilisation {worst['utilization']:g}, cs² {worst['cs2']:g}"
        f" ({html.escape(str(worst['distribution']))} service).</p>"
        + _table_html(
            errors.reset_index(), "p95 relative error (closed form / simulated - 1)", "queueing.csv", open_=True
        ),
    )


def _frontier_section(out: Path) -> _Section:
    from toolkit._planning.pareto import pareto
    from toolkit._planning.planner import plan

    plans = plan(**FRONTIER_QUESTION)
    meets = plans[plans["meets_slo"]]
    frontier = pareto(meets)
    frontier.to_csv(out / "frontier.csv", index=False)
    config = ["gpu", "quant", "backend", "tensor_parallel", "replicas"]
    staircase = pareto(meets, maximize=()).drop_duplicates(config).sort_values("cost_usd_month")
    shown = [*config, "batch", "ttft_ms", "tpot_ms", "e2e_p95_ms", "cost_usd_month", "quality"]
    question = ", ".join(f"{k} {v}" for k, v in FRONTIER_QUESTION.items())
    return _Section(
        "Capacity plan: cost against latency",
        _chart_html(_charts.frontier_chart(meets, frontier), "frontier", out)
        + f"<p>toolkit.plan({html.escape(question)}): {len(plans):,} candidates, {len(meets):,} meeting"
        " the SLO. Each step down the staircase below is a cheaper fleet and the latency it costs.</p>"
        + _table_html(staircase[shown], "Cost-latency staircase", "frontier.csv", open_=True),
    )


def _batching_section(reference: pd.DataFrame, out: Path) -> _Section:
    from toolkit._model.curves import batching_curve

    curve = batching_curve(**REFERENCE_SETUP)
    curve.to_csv(out / "batching_curve.csv", index=False)
    single = float(curve.loc[curve["batch"] == 1, "aggregate_tok_s"].iloc[0])
    measured = float(reference.loc[reference["in_flight"] == 1, "dec_tok_s"].iloc[0])
    setup = ", ".join(str(v) for v in REFERENCE_SETUP.values())
    return _Section(
        "Serving model: the reference hardware",
        _chart_html(_charts.batching_chart(curve), "batching_curve", out)
        + f"<p>Predicted from the datasheet and the default efficiencies ({html.escape(setup)} context"
        f" tokens): {single:,.0f} tokens/s single-stream, against {measured:,.0f} tokens/s measured at one"
        f" lane in flight in the reference run ({single / measured - 1:+.0%}). The KV cache holds"
        f" {int(curve['max_concurrent_seqs'].iloc[0]):,} such sequences; the reference ran at most"
        f" {int(reference['in_flight'].max())} in flight.</p>"
        + _table_html(curve, "Batching curve", "batching_curve.csv"),
    )


def stat_tiles(levels: pd.DataFrame) -> str:
    """Headline stat tiles of a sweep as HTML: time for all lanes, decode gain, prefix-cache hits.

    Parameters
    ----------
    levels : pandas.DataFrame
        Sweep levels: ``in_flight``, ``lanes``, ``wall_s`` (s), ``dec_tok_s`` (tokens/s) and
        optionally ``prefix_hit_rate`` (0..1).

    Returns
    -------
    str
        A ``<div class="tiles">`` of three tiles: wall clock at the top limit against the first,
        decode tokens/s gain from the first to the top limit, prefix-cache hit range (or n/a).
    """
    df = levels.sort_values("in_flight")
    first, last = df.iloc[0], df.iloc[-1]
    lanes = f"for {int(last['lanes'])} lanes " if "lanes" in df else ""
    tiles = [
        (
            f"{last['wall_s']:.0f} s",
            f"{lanes}at {int(last['in_flight'])} in flight, against {first['wall_s']:.0f} s at"
            f" {int(first['in_flight'])}",
        ),
        (
            f"{last['dec_tok_s'] / first['dec_tok_s']:.1f}x",
            f"decode throughput ({first['dec_tok_s']:,.0f} to {last['dec_tok_s']:,.0f} tokens/s)",
        ),
    ]
    hits = df["prefix_hit_rate"].dropna() if "prefix_hit_rate" in df else pd.Series(dtype=float)
    if len(hits):
        lo, hi = round(100 * hits.min()), round(100 * hits.max())
        tiles.append((f"{lo}%" if lo == hi else f"{lo}-{hi}%", "prefix cache hits (server /metrics)"))
    else:
        tiles.append(("n/a", "prefix cache hits: the server exposed no counter"))
    cards = "".join(
        f'<div class="tile"><div class="value">{html.escape(value)}</div>'
        f'<div class="label">{html.escape(label)}</div></div>'
        for value, label in tiles
    )
    return f'<div class="tiles">{cards}</div>'


def decomposition_note(levels: pd.DataFrame) -> str:
    """What a sweep's decomposition says, in one sentence of its measured numbers.

    Parameters
    ----------
    levels : pandas.DataFrame
        Sweep levels: ``in_flight``, ``wall_s`` (s), optionally ``llm_sum_s``, ``slot_wait_s`` (s)
        and ``verdict``.

    Returns
    -------
    str
        Wall clock and summed lane time from the first to the top limit, their ratio, the sweep's
        verdict and the slot wait's share of wall clock, where recorded.
    """
    df = levels.sort_values("in_flight")
    first, last = df.iloc[0], df.iloc[-1]
    span = f"from {int(first['in_flight'])} to {int(last['in_flight'])} in flight"
    wall = f"wall clock {first['wall_s']:,.1f} s to {last['wall_s']:,.1f} s"
    if "llm_sum_s" not in df or df["llm_sum_s"].isna().all():
        return f"{span}, {wall}; summed lane time was not recorded, so batching and queueing cannot be told apart."
    growth = last["llm_sum_s"] / first["llm_sum_s"]
    lane_time = f"summed lane time went {first['llm_sum_s']:,.1f} s to {last['llm_sum_s']:,.1f} s ({growth:.1f}x)"
    note = f"{span}, {wall}, while {lane_time}"
    if "verdict" in df and pd.notna(last["verdict"]):
        note += f": the sweep's verdict is {last['verdict']}"
    if "slot_wait_s" in df and pd.notna(last["slot_wait_s"]):
        share = last["slot_wait_s"] / last["wall_s"]
        note += f"; slot wait at the top limit {last['slot_wait_s']:,.2f} s ({share:.0%} of wall clock)"
    return note + "."


def _chart_html(chart: alt.TopLevelMixin, slug: str, out: Path) -> str:
    _charts.save_chart(chart, out / f"{slug}.png", out / f"{slug}.svg")
    spec = json.dumps(chart.to_dict()).replace("<", "\\u003c")  # no "</script>" can end the block
    return (
        f'<figure><div class="chart" data-chart="{slug}"></div>'
        f'<script type="application/json" id="spec-{slug}">{spec}</script>'
        f'<figcaption>Static copies: <a href="{slug}.png">PNG</a>, <a href="{slug}.svg">SVG</a>'
        "</figcaption></figure>"
    )


def _table_html(df: pd.DataFrame, summary: str, csv_name: str, *, open_: bool = False) -> str:
    table = df.to_html(index=False, escape=True, na_rep="", float_format=lambda v: f"{v:,.4g}", border=0)
    link = f'<a href="{html.escape(csv_name)}">CSV</a>'
    return (
        f"<details{' open' if open_ else ''}><summary>{html.escape(summary)} ({link})</summary>"
        f'<div class="table">{table}</div></details>'
    )


def _notebook_section(out: Path, base_url: str | None, model: str | None) -> _Section:
    """Execute every notebook against this run (parameters through the environment) and list them."""
    import nbformat
    from nbclient import NotebookClient

    env = {**os.environ, NOTEBOOK_ENV["sweep_dir"]: str(out.resolve())}
    for key, value in (("base_url", base_url), ("model", model)):
        if value:
            env[NOTEBOOK_ENV[key]] = value
    (out / "notebooks").mkdir(exist_ok=True)
    rows = []
    for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK_DIR)}}
        )
        start = time.perf_counter()
        try:
            client.execute(env=env)
            status = "ok"
        except Exception as err:  # noqa: BLE001 - a failing notebook is reported in the page, not fatal
            status = f"failed: {type(err).__name__}: " + (str(err).strip().splitlines() or [""])[-1]
        nbformat.write(nb, out / "notebooks" / path.name)
        rows.append((path.name, status, time.perf_counter() - start))
    items = "".join(
        f'<li><a href="notebooks/{html.escape(n)}">{html.escape(n)}</a>: {html.escape(s)} ({t:.0f} s)</li>'
        for n, s, t in rows
    )
    return _Section(
        "Notebooks",
        f"<p>Executed against this run and the catalogs; open them in Jupyter.</p><ul>{items}</ul>",
    )


# --- the page --------------------------------------------------------------------------------

_CSS = """
:root { --fg: #1b1b1b; --muted: #5f6368; --bg: #ffffff; --card: #f4f7f6; --line: #d9e0de; --accent: #00897B; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e8eaed; --muted: #a8adb3; --bg: #121212; --card: #1e2422; --line: #333a38; }
}
body { font: 15px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg); max-width: 1200px;
       margin: 0 auto; padding: 1.5rem; }
h1 { margin-bottom: 0.2rem; } h2 { border-bottom: 2px solid var(--accent); padding-bottom: 0.2rem; margin-top: 2.5rem; }
.muted, figcaption { color: var(--muted); font-size: 0.9em; }
.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(220px, 1fr)); gap: 1rem; margin: 1rem 0; }
.tile { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 0.8rem 1rem; }
.tile .value { font-size: 2rem; font-weight: 700; color: var(--accent); }
.tile .label { color: var(--muted); }
figure { margin: 1rem 0; overflow-x: auto; }
.table { overflow-x: auto; } table { border-collapse: collapse; font-size: 0.85em; }
th, td { padding: 0.2rem 0.5rem; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
dl.conditions { display: grid; grid-template-columns: max-content 1fr; gap: 0.1rem 1rem; }
dl.conditions dt { color: var(--muted); }
a { color: var(--accent); }
"""

# Dark pages get a matching chart config; the bar hue needs none (it keeps 3:1 on both).
_EMBED_JS = """
const dark = window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches;
const darkConfig = {background: '#121212', view: {stroke: '#333a38'},
  axis: {labelColor: '#e8eaed', titleColor: '#e8eaed', gridColor: '#333a38', domainColor: '#a8adb3', tickColor: '#a8adb3'},
  legend: {labelColor: '#e8eaed', titleColor: '#e8eaed'}, title: {color: '#e8eaed', subtitleColor: '#a8adb3'},
  header: {labelColor: '#e8eaed', titleColor: '#e8eaed'}, text: {color: '#e8eaed'}};
for (const el of document.querySelectorAll('div.chart')) {
  const spec = JSON.parse(document.getElementById('spec-' + el.dataset.chart).textContent);
  const opts = {renderer: 'svg', actions: false};
  if (dark) opts.config = darkConfig;
  vegaEmbed(el, spec, opts).catch(err => { el.textContent = 'chart failed: ' + err; });
}
"""


def _page(title: str, run: _Run, sections: Sequence[_Section]) -> str:
    import vl_convert
    from altair.utils.html import vl_version_for_vl_convert

    from toolkit import __version__

    bundle = vl_convert.javascript_bundle(vl_version=vl_version_for_vl_convert())
    conditions = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in run.conditions.items())
    body = "".join(f"<section><h2>{html.escape(s.title)}</h2>{s.body}</section>" for s in sections)
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{_CSS}</style>
<script>{bundle}</script>
</head><body>
<h1>{html.escape(title)}</h1>
<p class="muted">Generated {stamp} by toolkit {__version__}; self-contained, opens offline.</p>
<dl class="conditions">{conditions}</dl>
{body}
<script>{_EMBED_JS}</script>
</body></html>
"""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "run"
