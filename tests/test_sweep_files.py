"""Issue 39, ``python -m toolkit sweep``'s files: a FIFO, an oversized file, JSON nested too deeply for
the parser (in a prompts file and in ``--extra-body``) and a line that is not JSON each end in one
``error:`` line naming the file (and line) and exit status 2, before any server is contacted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.__main__ import main

ROOT = Path(__file__).resolve().parents[1]
CLOSED = "http://127.0.0.1:9"  # nothing is contacted: every case fails while reading its input
DEEP = "[" * 100_000 + "]" * 100_000


def _cli(*args: str, capsys) -> tuple[int, str]:
    code = main(["sweep", "--base-url", CLOSED, "--quiet", *args])
    return code, capsys.readouterr().err


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("option", ["--prompts", "--system-file"])
def test_a_fifo_is_refused_not_waited_on(tmp_path, option):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    args = ["--prompts", str(fifo)] if option == "--prompts" else ["--prompts", str(prompts), option, str(fifo)]
    # a subprocess: a reader that blocks on the FIFO would hang this test run, not just fail it
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "sweep", "--base-url", CLOSED, "--quiet", *args],
        capture_output=True, text=True, timeout=30, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    line = _one_error(done.stderr)
    assert option in line and str(fifo) in line and "not a regular file" in line


def test_an_oversized_prompts_file_is_refused_before_it_is_read(tmp_path, capsys):
    big = tmp_path / "prompts.txt"
    with open(big, "wb") as f:
        f.truncate((256 << 20) + 1)  # sparse: one line of 256 MiB and a byte, no disk used
    code, err = _cli("--prompts", str(big), capsys=capsys)
    assert code == 2
    line = _one_error(err)
    assert str(big) in line and f"at most {256 << 20} are read" in line


@pytest.mark.parametrize("name", ["system.txt"])
def test_an_oversized_system_file_is_refused(tmp_path, capsys, name):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    system = tmp_path / name
    system.write_bytes(b"x" * ((1 << 20) + 1))
    code, err = _cli("--prompts", str(prompts), "--system-file", str(system), capsys=capsys)
    assert code == 2 and f"at most {1 << 20} are read" in _one_error(err)


def test_deeply_nested_json_in_a_prompts_file_names_the_file_and_line(tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"fine"\n' + DEEP + "\n")
    code, err = _cli("--prompts", str(prompts), capsys=capsys)
    assert code == 2
    line = _one_error(err)
    assert f"{prompts}:2" in line and "nested too deeply" in line


def test_a_line_that_is_not_json_names_the_file_and_line(tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"fine"\n\n{"prompt": \n')
    code, err = _cli("--prompts", str(prompts), capsys=capsys)
    assert code == 2
    assert f"{prompts}:3: not JSON" in _one_error(err)  # the file's third line


def test_deeply_nested_extra_body_is_one_error_line(tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    with pytest.raises(SystemExit) as ended:
        main(["sweep", "--base-url", CLOSED, "--prompts", str(prompts), "--extra-body", DEEP])
    assert ended.value.code == 2
    line = _one_error(capsys.readouterr().err)
    assert "--extra-body" in line and "nested too deeply" in line


def test_extra_body_must_be_an_object(tmp_path, capsys):
    with pytest.raises(SystemExit) as ended:
        main(["sweep", "--base-url", CLOSED, "--prompts", "p", "--extra-body", "[1]"])
    assert ended.value.code == 2
    assert "--extra-body must be a JSON object, got list" in _one_error(capsys.readouterr().err)
