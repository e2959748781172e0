"""The report's sections: throughput, the time decomposition, the standard views, measured accuracy, then
the model's (batching, queueing, the frontier), and the notebooks."""

from __future__ import annotations

import html
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit._data import load_csv
from toolkit._model.curves import batching_curve
from toolkit._planning.pareto import pareto
from toolkit._planning.planner import plan
from toolkit._queueing.closed_forms import queue_wait, workload_presets
from toolkit._queueing.wait_check import compare_wait_models
from toolkit._report import charts as _charts
from toolkit._report import panels as _panels
from toolkit._report.blocks import _chart_html, _Section, _table_html
from toolkit._report.capacity_section import capacity_section
from toolkit._report.conclusion import _accuracy as _accuracy_words
from toolkit._report.measure import _Run
from toolkit._report.notebook import RENDERER_ENV
from toolkit._report.tiles import decomposition_note
from toolkit._report.trust_section import _trust_section
from toolkit._report.views import _sample_html, _views
from toolkit._validation.closed_loop import FIT_LIMITS, llamacpp_closed_loop_check, summarize_errors

__all__: list[str] = []


REFERENCE_CSV = "reference_vllm_sweep_32_lanes.csv"


# environment variables the notebooks read their parameters from
# notebooks executed at once (_notebook_section)
NOTEBOOK_WORKERS = 2
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
    "arrival_rate": 3,
    "prompt_tokens": 512,
    "output_tokens": 128,
    "slo_e2e_ms": 5000,
    "models": "Llama-3.1-8B",
    "backends": ("vllm", "ollama"),
    "tensor_parallel": (1, 2),
}


def _sections(run: _Run, out: Path, accuracy: pd.DataFrame | None, trust: object = None) -> list[_Section]:
    """The measured server's sections, then those about the model (``accuracy``: ``_accuracy_table``;
    ``trust``: the trust check of a profiled run)."""
    reference = load_csv(REFERENCE_CSV)
    ref_label = "vLLM, Bonsai-8B, RTX PRO 6000 (reference)"
    reference.to_csv(out / "reference_levels.csv", index=False)
    throughput = _charts.decode_throughput_chart(run.levels, reference, label=run.label, reference_label=ref_label)
    decomposition = _charts.decomposition_chart(run.levels, reference, label=run.label, reference_label=ref_label)
    lanes = "" if run.lanes is None else _table_html(run.lanes, f"Lane attempts: {run.label}", "lanes.csv")
    sections = [
        _Section(
            "Decode throughput against concurrency",
            _chart_html(throughput, "decode_throughput", out)
            + "<p>Output tokens per second of wall clock at each in-flight limit, the same lanes at"
            " every limit. Beside it, the reference run this chart reproduces (its own y scale); its"
            " 2-lane column is a measured dip, a level whose lanes spent their retry budgets and"
            " generated twice the output tokens of the others.</p>",
        ),
        *_views(run, out),
        _Section(
            "Where the time goes",
            _chart_html(decomposition, "decomposition", out)
            + "<p>Summed lane time flat across limits means the server batches the lanes; growing"
            " with the limit means it queues them. Slot wait is the serialized post-processing.</p><ul>"
            + f"<li><b>{html.escape(run.label)}</b>: {html.escape(decomposition_note(run.levels))}</li>"
            + f"<li><b>{html.escape(ref_label)}</b>: {html.escape(decomposition_note(reference))}</li>"
            + "</ul>"
            + _sample_html(run.levels, run.lanes)
            + _table_html(run.levels, f"Measured levels: {run.label}", "levels.csv")
            + lanes
            + _table_html(reference, f"Reference levels: {ref_label}", "reference_levels.csv"),
        ),
    ]
    if accuracy is not None:
        sections.append(_accuracy_section(accuracy, out))
    if trust is not None:
        sections.append(_trust_section(trust, run, out))
    if run.capacity is not None:
        sections.append(capacity_section(run.capacity, out, refused=getattr(trust, "refused", "")))
    return sections + [_batching_section(reference, out), _queueing_section(out), _frontier_section(out)]


def _accuracy_table(run: _Run) -> pd.DataFrame | None:
    """Predicted against measured for a Gemma run with its host: uncalibrated, then calibrated on some
    levels (``llamacpp_closed_loop_check``); None for runs the serving model cannot predict."""
    if run.host is None or run.lanes is None:
        return None

    return llamacpp_closed_loop_check((run.lanes, run.levels), gpu=run.host)


def _accuracy_section(table: pd.DataFrame, out: Path) -> _Section:
    table.to_csv(out / "accuracy.csv", index=False)
    summary = summarize_errors(table)
    fitted = table.attrs["calibration"]
    fitted_names = ("mbu", "mfu", "step_overhead_ms", "request_overhead_ms")
    params = ", ".join(f"{k} {float(fitted[k].iloc[0]):.3g}" for k in fitted_names)
    return _Section(
        "Predicted against measured",
        _chart_html(_panels._accuracy_chart(table), "accuracy", out)
        + "<p>The serving model predicts each level of this run (simulator, one request per lane, the"
        " lanes' own token counts) from the host's measured bandwidth and matrix rate, first with the"
        f" default efficiencies, then calibrated on limits {', '.join(map(str, FIT_LIMITS))} and checked on"
        f" the others (fitted: {html.escape(params)}). {html.escape(_accuracy_words(table))}</p>"
        + _table_html(summary, "Median and largest absolute relative error", "accuracy.csv", open_=True)
        + _table_html(table, "Every level and metric", "accuracy.csv"),
    )


def _queueing_section(out: Path) -> _Section:
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
        part="model",
    )


def _frontier_section(out: Path) -> _Section:
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
        part="model",
    )


def _batching_section(reference: pd.DataFrame, out: Path) -> _Section:
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
        part="model",
    )


def _notebook_section(out: Path, base_url: str | None, model: str | None, notebook_dir: Path) -> _Section:
    """Execute every notebook against this run (parameters through the environment) and list them."""
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError:
        raise ValueError(
            "execute_notebooks=True needs the notebooks extra: pip install 'llm-serving-capacity-toolkit[notebooks]'"
            " (or pass execute_notebooks=False)"
        ) from None

    # static SVG charts: the executed copies stay small and display anywhere, a code host included
    env = {**os.environ, NOTEBOOK_ENV["sweep_dir"]: str(out.resolve()), RENDERER_ENV: "svg"}
    for key, value in (("base_url", base_url), ("model", model)):
        if value:
            env[NOTEBOOK_ENV[key]] = value
    (out / "notebooks").mkdir(exist_ok=True)

    def run(path: Path) -> tuple[str, str, float]:
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(notebook_dir)}}
        )
        start = time.perf_counter()
        try:
            client.execute(env=env)
            status = "ok"
        except Exception as err:  # noqa: BLE001 - a failing notebook is reported in the page, not fatal
            status = f"failed: {type(err).__name__}: " + (str(err).strip().splitlines() or [""])[-1]
        nbformat.write(nb, out / "notebooks" / path.name)
        return path.name, status, time.perf_counter() - start

    # each kernel waits on its own start and imports for much of its run, so two at once finish the
    # set in about 60% of the time one after another takes, on two cores as on more
    with ThreadPoolExecutor(NOTEBOOK_WORKERS) as pool:
        rows = list(pool.map(run, sorted(notebook_dir.glob("*.ipynb"))))
    items = "".join(
        f'<li><a href="notebooks/{html.escape(n)}">{html.escape(n)}</a>: {html.escape(s)} ({t:.0f} s)</li>'
        for n, s, t in rows
    )
    return _Section(
        "Notebooks",
        f"<p>Executed against this run and the catalogs; open them in Jupyter.</p><ul>{items}</ul>",
        part="appendix",
    )
