"""The command line: every user error is one line on stderr with exit 2, never a traceback."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from fault_server import FaultServer

import toolkit

ROOT = Path(__file__).resolve().parent.parent
PLAN = ["plan", "--prompt-tokens", "512", "--output-tokens", "128"]


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, input=stdin
    )


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([*PLAN, "--rate", "-3"], id="negative rate"),
        pytest.param([*PLAN, "--rate", "3", "--gpu", "H999 Ultra"], id="unknown GPU"),
        pytest.param([*PLAN, "--rate", "3", "--percentile", "1.5"], id="percentile out of range"),
        pytest.param(
            [
                "sweep",
                "--base-url",
                "http://127.0.0.1:9",
                "--model",
                "m",
                "--prompts",
                "/no/such/file",
                "--limits",
                "1",
            ],
            id="missing prompts file",
        ),
        pytest.param(
            ["sweep", "--base-url", "http://127.0.0.1:9", "--model", "m", "--prompts", "README.md", "--limits", "1"],
            id="server down",
        ),
    ],
)
def test_user_errors_are_one_line_and_exit_2(args):
    result = _run(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


def test_version():
    result = _run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"toolkit {toolkit.__version__}"


def _loaded_after(argvs: list[list[str]], names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` are in ``sys.modules`` after the command line ran each of ``argvs`` in a
    fresh interpreter (a ``SystemExit`` of ``--help`` or a usage error ends only that call)."""
    code = (
        "import sys\nfrom toolkit.__main__ import main\n"
        f"for argv in {argvs!r}:\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        f"print(sorted(m for m in {names!r} if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return ast.literal_eval(result.stdout.strip().splitlines()[-1])


def test_help_and_usage_errors_import_neither_pandas_nor_scipy():
    argvs = [["--help"], ["plan", "--help"], ["plan", "--rate"]]
    assert _loaded_after(argvs, ("pandas", "scipy", "numpy", "httpx")) == []


def test_a_planning_question_does_not_import_scipy():
    # scipy.special costs 0.1-0.2 s of import on this machine; the planner's gamma functions are its own
    question = ["plan", "--rate", "3", "--prompt-tokens", "512", "--output-tokens", "128", "--slo-e2e-ms", "5000"]
    assert _loaded_after([[*question, "--model", "Llama-3.1-8B", "--workload", "bursty"]], ("pandas", "scipy")) == [
        "pandas"
    ]


def test_every_option_has_help_text():
    import argparse

    from toolkit._planning import cli as plan_cli
    from toolkit._report import cli as report_cli
    from toolkit._sweep import cli as sweep_cli

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    for module in (plan_cli, sweep_cli, report_cli):
        module.add_cli(sub)
    for name, subparser in sub.choices.items():
        for action in subparser._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings[0]} has no help text"


def test_a_closed_pipe_ends_quietly():
    """``| head -1``: the reader stops after one line of a 5 MB answer; the command exits quietly."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit", *PLAN, "--rate", "3", "--model", "Llama-3.1-8B", "--all", "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
    assert proc.returncode == 0


def test_report_json_gives_the_paths_and_the_conclusion(tmp_path):
    out = tmp_path / "rep"
    done = _run("report", "--recorded", "--no-notebooks", "--quiet", "--json", "--out", str(out))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert Path(payload["index"]) == out / "index.html" and (out / "index.html").exists()
    # the recorded run's verdict at its top limit, as levels.csv says
    verdict = pd.read_csv(out / "levels.csv").sort_values("in_flight")["verdict"].iloc[-1]
    assert verdict in payload["conclusion"]


def test_sweep_json_prints_the_levels(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("one two\nthree four five\n")
    with FaultServer(tokens=3, token_delay_s=0) as srv:
        done = _run(
            "sweep", "--base-url", srv.base_url, "--model", "fault-model", "--prompts", str(prompts),
            "--limits", "1,2", "--max-tokens", "3", "--quiet", "--json",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert [row["in_flight"] for row in payload["levels"]] == [1, 2]
    assert all(row["output_tokens"] == 2 * 3 for row in payload["levels"])  # 2 lanes x 3 tokens
    assert payload["stopped"] == ""
