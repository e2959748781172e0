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
        pytest.param([*PLAN, "--arrival-rate", "-3"], id="negative rate, the API's name"),
        pytest.param([*PLAN, "--rate", "3", "--gpu", "H999 Ultra"], id="unknown GPU"),
        pytest.param([*PLAN, "--rate", "3", "--percentile", "1.5"], id="percentile out of range"),
        # argparse's own errors: a value of the wrong type, an unknown option, a missing one
        pytest.param([*PLAN, "--rate", "x"], id="rate not a number"),
        pytest.param([*PLAN, "--rate", "3", "--bogus"], id="unknown option"),
        pytest.param(["plan", "--rate", "3"], id="missing options"),
        pytest.param(["nonsense"], id="unknown command"),
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


def test_a_question_nothing_answers_prints_the_empty_table_and_one_warning_line():
    # Llama-3.1-8B's context window is 131,072 tokens: no plan holds 200,000 + 100 of them
    result = _run(
        "plan", "--rate", "1", "--prompt-tokens", "200000", "--output-tokens", "100", "--model", "Llama-3.1-8B"
    )
    assert result.returncode == 0 and "0 plan(s)" in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: no plan: a request of 200,100 tokens"), result.stderr


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


def test_a_planning_question_imports_neither_pandas_nor_scipy():
    # scipy.special costs 0.1-0.2 s of import on this machine and pandas 0.3-0.4 s: the planner's gamma
    # functions are its own, and the table is laid out from its columns; only --json uses pandas
    question = ["plan", "--rate", "3", "--prompt-tokens", "512", "--output-tokens", "128", "--slo-e2e-ms", "5000"]
    small = [*question, "--model", "Llama-3.1-8B", "--workload", "bursty"]
    argvs = [small, [*small, "--pareto"], [*small, "--all", "--gpu", "L4"]]
    assert _loaded_after(argvs, ("pandas", "scipy")) == []
    assert _loaded_after([[*small, "--json"]], ("pandas", "scipy")) == ["pandas"]


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


# --- the table: what pandas' to_string prints ---------------------------------------------------------


def _reference_table(table: pd.DataFrame, top: int) -> tuple[str, int]:
    """The command line's table written with pandas: rows equal except in backend, batch and
    utilization grouped (``groupby(sort=False, dropna=False)``: groups in order of first appearance,
    NaN equal to NaN), the first ``top`` groups shown with their backends joined, batch range and
    highest utilization, printed by ``DataFrame.to_string``."""
    merged = ("backend", "batch", "utilization")
    columns = [c for c in table.columns if c not in ("binding_constraint", "warnings")]
    keys = [c for c in columns if c not in merged]
    if not len(table):
        return table[columns].to_string(index=False), 0
    by = table.groupby(keys, sort=False, dropna=False)
    group = by.ngroup().to_numpy()
    rows = []
    for g in range(min(top, by.ngroups)):
        part = table[group == g]
        row = part.iloc[0][columns].copy()
        row["backend"] = "|".join(dict.fromkeys(part["backend"]))
        low, high = part["batch"].min(), part["batch"].max()
        row["batch"] = str(low) if low == high else f"{low}-{high}"
        row["utilization"] = part["utilization"].max()
        rows.append(row)
    shown = pd.DataFrame(rows).astype({c: table[c].dtype for c in columns if c not in ("batch",)})
    return shown.to_string(index=False, float_format=lambda x: f"{x:.4g}"), by.ngroups


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param([], id="meeting the SLOs"),
        pytest.param(["--all", "--top", "100000", "--max-replicas", "2"], id="all, some failing"),
        pytest.param(["--pareto"], id="pareto"),
        pytest.param(["--slo-ttft-ms", "1"], id="none"),
    ],
)
def test_the_table_is_what_pandas_prints(capsys, extra):
    from toolkit.__main__ import main
    from toolkit._planning.pareto import pareto

    question = dict(arrival_rate=6, prompt_tokens=700, output_tokens=150, slo_e2e_ms=8000, percentile=0.9)
    subset = dict(models=["Llama-3.1-8B", "Mistral-7B", "Gemma-3-270M"], gpus=["L4", "H100 SXM", "RTX 4090"])
    argv = ["plan", "--rate", "6", "--prompt-tokens", "700", "--output-tokens", "150", "--slo-e2e-ms", "8000"]
    argv += [
        "--percentile",
        "0.9",
        *(f"--model={m}" for m in subset["models"]),
        *(f"--gpu={g}" for g in subset["gpus"]),
    ]
    assert main(argv + extra) == 0
    printed = capsys.readouterr().out.splitlines()
    table = toolkit.plan(
        **question,
        **subset,
        slo_ttft_ms=1 if "--slo-ttft-ms" in extra else None,
        max_replicas=2 if "--max-replicas" in extra else 64,
    )
    if "--all" not in extra:
        table = table[table["meets_slo"]]
    if "--pareto" in extra:
        table = pareto(table, minimize=("cost_usd_month", "e2e_p90_ms"))
    text, groups = _reference_table(table, 100000 if "--top" in extra else 20)
    assert printed[:-1] == text.splitlines()
    assert printed[-1].startswith(f"{len(table)} plan(s) in {groups} groups")
    if "--all" in extra:
        assert {"True", "False"} <= set(" ".join(printed).split())


def test_table_layout_against_pandas_on_edge_cases():
    import numpy as np

    from toolkit._planning.cli import _to_string

    names = np.array(["short", "a name far longer than the forty characters shown", "mid"], dtype=object)
    columns = {
        "text": (names, np.array([1, 0, 2, 1])),
        "n": np.array([1, -20, 300, 4]),
        "x": np.array([np.nan, 1234567.0, -0.000123456, np.inf]),
        "ok": np.array([True, False, True, True]),
        "range": ["1", "2-64", "8", "16-32"],
        "longer_than_its_cells_header": np.array([0.5, 1.0, 2.0, 3.25]),
    }
    frame = pd.DataFrame({k: names[v[1]] if isinstance(v, tuple) else v for k, v in columns.items()})
    expected = frame.to_string(index=False, float_format=lambda x: f"{x:.4g}")
    empty = frame.iloc[:0].to_string(index=False, float_format=lambda x: f"{x:.4g}")
    assert _to_string(columns) == expected
    nothing = {k: (v[0], v[1][:0]) if isinstance(v, tuple) else v[:0] for k, v in columns.items()}
    assert _to_string(nothing) == empty


@pytest.mark.parametrize("mix", [None, 0], ids=["hashed", "every row colliding"])
def test_groups_of_equal_rows_in_order_of_first_appearance(monkeypatch, mix):
    import numpy as np

    from toolkit._planning import cli

    if mix is not None:  # every row hashes alike: the grouping falls back to sorting the keys
        monkeypatch.setattr(cli, "_MIX", mix)
    rng = np.random.default_rng(7)
    n = 2000
    floats = rng.choice([0.5, 1.25, np.nan, -0.0, 0.0, 3.0], n)
    ints = rng.integers(0, 4, n)
    names = np.array(["a", "b", "c", "a"], dtype=object)  # a value listed twice: equal text, two codes
    codes = rng.integers(0, 4, n)
    group = cli._groups([cli._key(floats), cli._key(ints), cli._key((names, codes))])
    frame = pd.DataFrame({"f": floats, "i": ints, "t": names[codes]})
    expected = frame.groupby(["f", "i", "t"], sort=False, dropna=False).ngroup().to_numpy()
    # pandas treats -0.0 and 0.0 as one value, as the command line does
    assert np.array_equal(group, expected)
