"""The benchmark report: measure a server (or read a recorded run), draw it, write one HTML folder.

``build_report`` writes ``reports/<date>-<name>/`` with ``index.html`` (self-contained: the Vega,
Vega-Lite and Vega-Embed scripts are inlined, nothing is fetched), every chart as PNG and SVG, every
table as CSV and the executed notebooks. Strings that came from a server or a user (model names,
error texts, URLs) are escaped.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from pathlib import Path
from urllib.parse import urlsplit

import pandas as pd
from tqdm.auto import tqdm

from toolkit._report.capacity_section import capacity_sentence
from toolkit._report.conclusion import conclusion
from toolkit._report.measure import (
    LOCAL_SWEEP,
    REMOTE_SWEEP,
    _display_url,
    _measure,
    _measure_local,
    _recorded_run,
    _Run,
)
from toolkit._report.page import _page, _slug
from toolkit._report.prefix_check import with_prediction
from toolkit._report.sections import _accuracy_table, _notebook_section, _sections
from toolkit._report.trust_section import _trust
from toolkit._sweep.files import redact
from toolkit._sweep.host_state import BUSY_OPENING

__all__ = ["build_report"]

# A checkout's folders, relative to the working directory: the defaults of ``notebook_dir`` and
# ``reports_dir``.
NOTEBOOK_DIR = Path("notebooks")
REPORTS_DIR = Path("reports")
FAILED_FILE = "FAILED.txt"
# seconds per phase of the report (tidy: phase, seconds), read back by ``python -m toolkit report --json``
TIMING_FILE = "timing.csv"


def build_report(
    out_dir: str | Path | None = None,
    base_url: str | None = None,
    model: str | None = None,
    name: str | None = None,
    *,
    recorded: bool = False,
    run: str | Path | None = None,
    execute_notebooks: bool = True,
    api_key: str | None = None,
    notebook_dir: str | Path = NOTEBOOK_DIR,
    reports_dir: str | Path = REPORTS_DIR,
    progress: bool = True,
) -> Path:
    """Measure a server, draw the results beside the reference run, and write the HTML report.

    The page opens with a conclusion in words (peak throughput and where it is, the batching verdict
    and how sure it is, failures, the model's held-out error) and headline tiles; then the measured
    server's sections (throughput, latency distributions, throughput against latency, the request
    timeline, successes and errors, the time decomposition, predicted against measured); then, under
    "About the model", the sections that do not depend on the server.

    Three sources, in this order: ``base_url`` (or env ``BASE_URL``) measures that
    OpenAI-compatible server with the full 32-lane sweep at in-flight limits 1..32; ``recorded=True``
    reads the llama-server run recorded in the package data; otherwise the local llama-server is started
    with the embedded Gemma-3-270M model and swept with 8 lanes at limits 1, 2, 4, 8.

    Parameters
    ----------
    out_dir : str or pathlib.Path, optional
        Report folder; default ``<reports_dir>/<YYYY-MM-DD>-<name>``, or ``...-2``, ``...-3`` when an
        earlier report of the same day holds that folder.
    base_url : str, optional
        Server root (``http://host:port``); env ``BASE_URL`` when omitted.
    model : str, optional
        Model name the server expects; env ``MODEL`` when omitted; None takes the first model the
        server lists.
    name : str, optional
        Report name used in the folder name; derived from the model when omitted.
    recorded : bool
        Draw the recorded run (package data) instead of measuring (no server needed).
    run : str or pathlib.Path, optional
        Draw a run :func:`toolkit.read_run` reads instead of measuring (no server needed): another tool's
        result file (vLLM bench, GuideLLM, AIPerf, inference-perf), a folder of them, or a sweep folder.
        The serving model is not checked against it (its machine is not known).
    execute_notebooks : bool
        Execute ``<notebook_dir>/*.ipynb`` against the same run and keep them in the folder.
    api_key : str, optional
        Bearer token for ``base_url`` (default: env ``TOOLKIT_API_KEY``); never written anywhere.
    notebook_dir : str or pathlib.Path
        Folder of the notebooks to execute (default ``notebooks`` under the working directory).
    reports_dir : str or pathlib.Path
        Folder the default ``out_dir`` goes under (default ``reports`` under the working directory).
    progress : bool
        Show a progress bar of the report's steps (measuring, charts, notebooks, page).

    Returns
    -------
    pathlib.Path
        The ``index.html`` written (last, so a folder with one holds a finished report). When the
        report fails, the error is raised and nothing is lost: a folder this call created with nothing
        in it is removed; a folder holding what was finished (a sweep's files) is kept, with
        ``FAILED.txt`` saying why the report stopped. Beside it: ``<chart>.png`` / ``<chart>.svg`` per chart,
        ``levels.csv`` (one row per in-flight limit, the columns of ``SweepResult.levels``: wall_s in
        s, dec_tok_s in tokens/s, ...), ``lanes.csv`` (one row per lane attempt) where measured, and
        from the lanes ``latency.csv`` (TTFT, ITL or TPOT, E2E percentiles per level, ms),
        ``throughput_latency.csv`` and ``outcomes.csv`` (attempts per level by outcome),
        ``reference_levels.csv``, ``batching_curve.csv``, ``queueing.csv``, ``frontier.csv``,
        ``accuracy.csv`` where calibration is available, ``notebooks/*.ipynb`` executed, and
        ``timing.csv`` (``phase``, ``seconds``: the wall time of each phase, ``measure``, ``charts``,
        ``notebooks``, ``page`` and ``total``, with a local run's ``measure`` split into
        ``measure.server``, ``.profile``, ``.sweep``, ``.host``, ``.replay_stretch``, ``.replay`` and ``.capacity``
        (the page is written after ``timing.csv``, so ``page`` leaves out writing it). A local
        llama-server run is first profiled (``profile.csv``, ``profile_cells.csv``), the model is
        calibrated on the profile (``calibration.csv``) and checked on the sweep (``accuracy.csv``)
        and on a replayed production-trace slice (``replay.csv``, ``replay_accuracy.csv``); from a
        busy host no fit is presented. Its capacity at a p99 TTFT and TPOT pair is searched and
        predicted (``capacity.csv``: every step of each search, ``capacity.png``/``.svg``).
    """
    base_url = base_url or os.environ.get("BASE_URL") or None
    model = model or os.environ.get("MODEL") or None
    if run is not None:
        default_name = _slug(Path(run).stem or "run")
    elif base_url:
        default_name = _slug(model or urlsplit(base_url).hostname or "server")
    else:
        default_name = "recorded-llama-server" if recorded else "llama-server-gemma3-270m"
    name = name or default_name
    out = (
        Path(out_dir)
        if out_dir is not None
        else unused_folder(Path(reports_dir), f"{dt.date.today().isoformat()}-{_slug(name)}")
    )
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        source = (base_url, model, recorded, run)
        return _write(out, source, name, execute_notebooks, api_key, Path(notebook_dir), progress)
    except BaseException as exc:
        _after_failure(out, created, exc, secrets=(api_key or os.environ.get("TOOLKIT_API_KEY") or "",))
        raise


def unused_folder(parent: Path, stem: str) -> Path:
    """``parent/stem``, or ``parent/stem-2``, ``-3``... the first that does not exist or is empty, so a
    second report of the same day writes beside the first instead of refusing its sweep."""
    for k in range(1, 10_000):
        path = parent / (stem if k == 1 else f"{stem}-{k}")
        if not path.exists() or (path.is_dir() and not any(path.iterdir())):
            return path
    raise ValueError(f"reports_dir: {parent} holds 9,999 reports named {stem}; pass out_dir")


def _after_failure(out: Path, created: bool, exc: BaseException, *, secrets: tuple[str, ...]) -> None:
    """Leave nothing where nothing was written (a folder this call created is removed), else keep
    what was finished and say in ``FAILED.txt`` why the report stopped."""
    if not any(p.is_file() for p in out.rglob("*")):
        if created:
            shutil.rmtree(out, ignore_errors=True)
        return
    why = redact(f"{type(exc).__name__}: {exc}", secrets)
    (out / FAILED_FILE).write_text(
        f"The report failed before it was finished: {why}\nThe files here are what was finished before it"
        " stopped; there is no index.html.\n",
        encoding="utf-8",
    )


def _write(
    out: Path,
    source: tuple[str | None, str | None, bool, str | Path | None],
    name: str,
    execute_notebooks: bool,
    api_key: str | None,
    notebook_dir: Path,
    progress: bool,
) -> Path:
    base_url, model, recorded, read_path = source
    bar = tqdm(total=4, desc="report", unit="step", disable=not progress)
    bar.set_postfix_str("measuring")
    clock = [time.perf_counter()]
    phase_s: dict[str, float] = {}

    def lap(phase: str) -> None:
        clock.append(time.perf_counter())
        phase_s[phase] = clock[-1] - clock[-2]

    if read_path is not None:
        run = _read(read_path)
    elif base_url:
        run = _measure(
            base_url,
            out,
            REMOTE_SWEEP,
            f"{model or 'server'} at {_display_url(base_url)}",
            model=model,
            api_key=api_key,
        )
    elif recorded:
        run = _recorded_run()
    else:
        run = _measure_local(out)
    run.levels = with_prediction(run.levels, run.lanes, run.shared_prefix_tokens, LOCAL_SWEEP["lanes"])
    run.levels.to_csv(out / "levels.csv", index=False)
    if run.lanes is not None:
        run.lanes.to_csv(out / "lanes.csv", index=False)
    lap("measure")
    bar.update()
    bar.set_postfix_str("charts and tables")
    trust = _trust(run)
    accuracy = _accuracy_table(run) if trust is None else None
    sections = _sections(run, out, accuracy, trust)
    lap("charts")
    bar.update()
    bar.set_postfix_str("notebooks")
    if execute_notebooks:
        sections.append(_notebook_section(out, base_url, model, notebook_dir))
    lap("notebooks")
    bar.update()
    bar.set_postfix_str("page")
    summary = conclusion(run.levels, run.lanes, accuracy)
    refused = trust.refused if trust is not None else ""
    if trust is not None and not refused:
        summary = summary + "\n" + trust.sentence
    if run.capacity is not None:
        summary = summary + "\n" + capacity_sentence(run.capacity, refused=refused)
    busy = busy_opening(run.conditions.get("warning", ""), refused)
    summary = busy + "\n" + summary if busy else summary
    (out / "conclusion.txt").write_text(summary + "\n", encoding="utf-8")
    lap("page")
    phase_s["total"] = clock[-1] - clock[0]
    timing = [*phase_s.items(), *((f"measure.{k}", v) for k, v in run.phase_s.items())]
    pd.DataFrame(timing, columns=["phase", "seconds"]).round(2).to_csv(out / TIMING_FILE, index=False)
    index = out / "index.html"
    index.write_text(_page(f"Serving capacity report: {name}", run, summary, sections), encoding="utf-8")
    bar.update()
    bar.close()
    return index


def _read(path: str | Path) -> _Run:
    """A run another tool (or a sweep) wrote, as the report's run: its levels and requests, and its conditions."""
    from toolkit._interop.read import read_run

    read = read_run(path)
    attrs = read.levels.attrs
    conditions = {"source": f"{attrs['source']} ({attrs['format']}, {attrs['version']}); no server was started"}
    conditions.update({k: str(v) for k, v in attrs["conditions"].items()})
    label = f"{attrs['conditions'].get('tool', attrs['format'])} run ({Path(attrs['source']).name})"
    return _Run(read.levels, read.lanes if len(read.lanes) else None, label, conditions)


def busy_opening(load_warning: str, refused: str) -> str:
    """The one paragraph that opens the conclusion of a report measured on a busy host, or ''.

    ``load_warning`` is the sweep's (other processes busy during it), ``refused`` the trust
    check's (other processes busy during the profile, or a profile too unsteady to fit: no fit
    presented). Each starts with "Measured on a busy (or unsteady) host: "; when both fired, the
    sweep's follows the refusal without its opening."""
    if not (load_warning and refused):
        return load_warning or refused
    load = load_warning.removeprefix(BUSY_OPENING)
    return f"{refused.rstrip()} Also, {load}"
