"""Run notebooks in a real JupyterLab, in headless Chromium, with the network cut to loopback.

Used by ``tests/test_jupyterlab.py`` (every chart draws, no cell errs) and by ``make screenshots``
(or ``make report SCREENSHOTS=1``: a screenshot of each executed notebook of the last report). The browser is the system's Chromium driven through
Playwright; every request to anything but 127.0.0.1 is aborted and recorded, so a chart that would
need a CDN fails here exactly as it would on an air-gapped cluster. JupyterLab's windowing is turned
off so that every cell is in the page (and in the screenshot).

Run as a script: ``python tests/jupyter_browser.py OUT_DIR [NOTEBOOK ...]`` writes ``OUT_DIR/<name>.png``
and ``OUT_DIR/notebooks.json`` (per notebook: cells, chart outputs, errors, blocked requests).
``--from-report FILE`` (the JSON ``python -m toolkit report --json`` printed, as ``make screenshots``
does) writes them to ``<report folder>/notebook-screenshots`` with the notebooks drawing that report's
sweep (``TOOLKIT_SWEEP_DIR``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART = "canvas.marks, svg.marks, .vega-embed canvas, .vega-embed svg, .jp-RenderedSVG svg, .jp-RenderedSVG img"
ERROR_TEXTS = ("Traceback (most recent call last)", "Error loading script", "Javascript Error", "[object Object]")


@dataclass
class NotebookRun:
    """What one notebook did in the browser."""

    name: str
    code_cells: int = 0
    executed_cells: int = 0
    chart_cells: int = 0
    charts_drawn: int = 0
    errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    screenshot: str | None = None


def chromium() -> str | None:
    """The system Chromium's path, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_lab(root: Path, settings: Path, env: dict) -> tuple[subprocess.Popen, str]:
    port, token = _free_port(), secrets.token_hex(16)
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True, exist_ok=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none"})
    )
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True, exist_ok=True)
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    log = open(root / "lab.log", "w")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={settings}",
         "--ServerApp.open_browser=False", "--allow-root", "--LabApp.extension_manager=readonly"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            return proc, f"{base}|{token}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > end:
                proc.kill()
                raise RuntimeError(f"JupyterLab did not start: {(root / 'lab.log').read_text()[-2000:]}") from None
            time.sleep(0.5)


def run_notebooks(notebooks: list[Path], screenshots: Path | None = None, timeout_s: float = 420) -> list[NotebookRun]:
    """Open each notebook in JupyterLab, run all cells, and report what rendered."""
    from playwright.sync_api import sync_playwright

    browser_path = chromium()
    if browser_path is None:
        raise FileNotFoundError("no chromium on PATH (make chromium installs it)")
    work = Path(tempfile.mkdtemp(prefix="toolkit-lab-"))
    settings = work / ".settings"
    for nb in notebooks:
        shutil.copy(nb, work / nb.name)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_CONFIG_DIR": str(work / ".jupyter")}
    lab, address = _start_lab(work, settings, env)
    base, token = address.split("|")
    runs = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=browser_path,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                      "--disable-sync", "--no-first-run"],
            )  # fmt: skip
            for nb in notebooks:
                runs.append(_run_one(browser, base, token, nb.name, screenshots, timeout_s))
            browser.close()
    finally:
        lab.terminate()
        try:
            lab.wait(20)
        except subprocess.TimeoutExpired:
            lab.kill()
        shutil.rmtree(work, ignore_errors=True)
    return runs


def _run_one(browser, base: str, token: str, name: str, screenshots: Path | None, timeout_s: float) -> NotebookRun:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    run = NotebookRun(name)
    context = browser.new_context(viewport={"width": 1280, "height": 900})

    def gate(route) -> None:
        host = route.request.url.split("/")[2].split(":")[0] if "://" in route.request.url else ""
        if route.request.url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            run.blocked.append(route.request.url[:200])
            route.abort()

    context.route("**/*", gate)
    page = context.new_page()
    page.on("pageerror", lambda exc: run.errors.append(f"page error: {str(exc)[:300]}"))
    # a workspace of its own, reset: JupyterLab would otherwise reopen the notebooks of earlier pages
    page.goto(f"{base}/lab/workspaces/{Path(name).stem}/tree/{name}?reset&token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    with contextlib.suppress(PlaywrightTimeout):  # a notebook saved with another kernel name asks which to start
        page.click(".jp-Dialog .jp-mod-accept", timeout=5_000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-Notebook-ExecutionIndicator')].some(e => e.dataset.status === 'idle')",
        timeout=120_000,
    )
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    end = time.monotonic() + timeout_s
    prompts: list[str] = []
    while time.monotonic() < end:
        prompts = page.eval_on_selector_all(".jp-CodeCell .jp-InputPrompt", "els => els.map(e => e.textContent)")
        if prompts and all(p.strip().startswith("[") and p.strip()[1:-2].isdigit() for p in prompts):
            break
        time.sleep(1)
    page.wait_for_timeout(3000)  # widgets and charts draw after the kernel's reply
    run.code_cells = len(prompts)
    run.executed_cells = sum(p.strip()[1:-2].isdigit() for p in prompts if p.strip().startswith("["))
    cells = page.query_selector_all(".jp-CodeCell")
    for cell in cells:
        source = cell.eval_on_selector(".jp-InputArea-editor", "e => e.innerText")
        text = cell.eval_on_selector(".jp-Cell-outputWrapper", "e => e.innerText") if cell.query_selector(
            ".jp-Cell-outputWrapper") else ""  # fmt: skip
        for needle in ERROR_TEXTS:
            if needle in text:
                run.errors.append(f"{source.splitlines()[0][:80] if source else '?'}: {needle}")
        if "chart(" in source.lower() or "alt.Chart(" in source:
            run.chart_cells += 1
            if cell.query_selector(CHART):
                run.charts_drawn += 1
            else:
                run.errors.append(f"no chart drawn by cell starting {source.splitlines()[0][:80]!r}")
    if screenshots is not None:
        screenshots.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PlaywrightTimeout):  # fold the file browser away: the notebook alone
            page.click("li.lm-TabBar-tab[data-id='filebrowser']", timeout=5_000)
        height = page.evaluate(
            "() => Math.max(...[...document.querySelectorAll('.jp-WindowedPanel-outer, .jp-Notebook')]"
            ".map(e => e.scrollHeight))"
        )
        page.set_viewport_size({"width": 1280, "height": int(min(max(height + 150, 900), 30000))})
        page.evaluate("() => document.querySelectorAll('.jp-WindowedPanel-outer').forEach(e => e.scrollTo(0, 0))")
        page.wait_for_timeout(1500)
        path = screenshots / f"{Path(name).stem}.png"
        page.screenshot(path=str(path))
        run.screenshot = str(path)
    context.close()
    return run


def main(argv: list[str]) -> int:
    """Script entry: screenshots of the notebooks (default: all) into argv[0]."""
    if argv[:1] == ["--from-report"]:
        folder = Path(json.loads(Path(argv[1]).read_text())["folder"])
        os.environ["TOOLKIT_SWEEP_DIR"] = str(folder.resolve())
        argv = [str(folder / "notebook-screenshots"), *argv[2:]]
    out = Path(argv[0])
    notebooks = [Path(a) for a in argv[1:]] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    if chromium() is None:
        print("notebook screenshots skipped: no chromium (run `make chromium`)", file=sys.stderr)
        return 0
    runs = run_notebooks(notebooks, screenshots=out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "notebooks.json").write_text(json.dumps([asdict(r) for r in runs], indent=2) + "\n")
    for r in runs:
        state = "ok" if not r.errors else f"{len(r.errors)} problems"
        print(f"{r.name}: {r.executed_cells}/{r.code_cells} cells, {r.charts_drawn}/{r.chart_cells} charts, {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
