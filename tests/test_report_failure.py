"""Issue 39: a report that fails leaves nothing where nothing was finished, and keeps (with a note)
what was; on the command line the failure is one ``error:`` line and exit status 2."""

from __future__ import annotations

import socket

import pytest
from hostile_server import MODEL, HostileServer

import toolkit
from toolkit.__main__ import main


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_report_that_measured_nothing_leaves_no_folder(tmp_path):
    out = tmp_path / "reports" / "r"
    with pytest.raises(ConnectionError):
        toolkit.build_report(out_dir=out, base_url=_closed_url(), model=MODEL, execute_notebooks=False, progress=False)
    assert not out.exists()
    assert (tmp_path / "reports").exists()  # only the folder the call would have filled is removed


def test_a_folder_that_existed_before_is_left_in_place(tmp_path):
    with pytest.raises(ConnectionError):
        toolkit.build_report(out_dir=tmp_path, base_url=_closed_url(), model=MODEL, execute_notebooks=False, progress=False)  # fmt: skip
    assert tmp_path.exists() and not list(tmp_path.iterdir())


def test_a_report_that_fails_after_measuring_keeps_the_measurements_and_says_why(tmp_path, monkeypatch):
    from toolkit._report import build as _report

    def broken(*args, **kwargs):
        raise RuntimeError("the charts could not be drawn")

    monkeypatch.setattr(_report, "REMOTE_SWEEP", {"lanes": 2, "limits": (1,), "max_tokens": 4})
    monkeypatch.setattr(_report, "_sections", broken)
    out = tmp_path / "r"
    with HostileServer() as server, pytest.raises(RuntimeError, match="charts"):
        toolkit.build_report(out_dir=out, base_url=server.base_url, model=MODEL, execute_notebooks=False, progress=False)  # fmt: skip
    assert len(server.chat) == 2
    assert (out / "sweep" / "lanes.jsonl").exists() and (out / "levels.csv").exists()
    assert not (out / "index.html").exists()
    note = (out / _report.FAILED_FILE).read_text()
    assert "RuntimeError: the charts could not be drawn" in note


def test_the_report_command_fails_in_one_line_and_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "r"
    code = main(["report", "--base-url", _closed_url(), "--model", MODEL, "--out", str(out), "--no-notebooks", "--quiet"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert not out.exists()
