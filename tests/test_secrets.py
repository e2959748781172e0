"""The API key is sent as a bearer token and nowhere else: not in files, logs, output or exceptions.

A sentinel key (a string found nowhere else) is handed to the sweep as a parameter, through the
environment variable the sweep documents (``TOOLKIT_API_KEY``, see ``api_key_env``) and inside a
URL's user-info. The fault server records the Authorization header of every request and, to force the
error paths, can echo that header back in its error bodies, as a careless proxy would.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
from fault_server import FaultServer

import toolkit

SENTINEL = "sk-sentinel-6b1d0e9c4f2a47d8b3e5"
PROMPTS = [f"alpha beta gamma lane{i}" for i in range(3)]
FAULTY = [PROMPTS[0], f"{PROMPTS[1]} [[fault:500]]", f"{PROMPTS[2]} [[fault:reset]]"]


def _files_containing(root: Path, needle: str) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            hits.append(str(path.relative_to(root)))
    return hits


def _sweep(url: str, out: Path, **kwargs):
    kwargs = {"limits": (1, 2), "max_tokens": 8, "timeout_s": 5, "out_dir": out, "attempts": 2, **kwargs}
    return toolkit.run_sweep(url, "fault-model", kwargs.pop("prompts", FAULTY), **kwargs)


@pytest.fixture
def server():
    with FaultServer(tokens=3, token_delay_s=0, echo_authorization=True, require_key=SENTINEL) as srv:
        yield srv


def _assert_nowhere(needle: str, *, out: Path, texts: dict[str, str]) -> None:
    assert not _files_containing(out, needle), f"key written to {_files_containing(out, needle)}"
    for where, text in texts.items():
        assert needle not in text, f"key found in {where}"


def test_key_parameter_is_sent_as_bearer_and_written_nowhere(server, tmp_path, capfd, caplog):
    caplog.set_level(logging.DEBUG)  # httpx and httpcore log requests at INFO and DEBUG
    out = tmp_path / "sweep"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _sweep(server.base_url, out, api_key=SENTINEL, progress=True)
    chat = server.chat_requests()
    assert chat and all(r["authorization"] == f"Bearer {SENTINEL}" for r in chat)
    assert all(r["authorization"] == f"Bearer {SENTINEL}" for r in server.other_requests)
    # the server echoed the key in its 500 bodies: the recorded error text must not carry it on
    errors = result.lanes.loc[result.lanes["outcome"] == "error", "error"]
    assert errors.str.contains("500").any() and errors.str.contains("Authorization").any()
    captured = capfd.readouterr()
    _assert_nowhere(
        SENTINEL,
        out=out,
        texts={
            "stdout": captured.out,
            "stderr": captured.err,
            "logs": caplog.text,
            "warnings": " ".join(str(w.message) for w in caught),
            "lanes": result.lanes.to_json(),
            "levels": result.levels.to_json(),
            "params": repr(result.params),
            "result": repr(result),
        },
    )
    assert {"lanes.jsonl", "levels.csv", "run.json"} <= {p.name for p in out.iterdir()}


def test_key_from_the_environment_is_sent_and_written_nowhere(server, tmp_path, monkeypatch, capfd, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("TOOLKIT_API_KEY", SENTINEL)
    out = tmp_path / "sweep"
    result = _sweep(server.base_url, out, progress=True)
    assert all(r["authorization"] == f"Bearer {SENTINEL}" for r in server.chat_requests())
    assert (result.lanes["outcome"] == "ok").any()
    captured = capfd.readouterr()
    _assert_nowhere(
        SENTINEL,
        out=out,
        texts={"stdout": captured.out, "stderr": captured.err, "logs": caplog.text, "params": repr(result.params)},
    )


def test_a_password_in_the_url_is_written_nowhere(tmp_path, capfd, caplog):
    caplog.set_level(logging.DEBUG)
    with FaultServer(tokens=3, token_delay_s=0, echo_authorization=True) as server:
        url = f"http://user:{SENTINEL}@127.0.0.1:{server.port}"
        out = tmp_path / "sweep"
        result = _sweep(url, out, progress=False)
        assert server.chat_requests()  # the sweep did reach the server
    captured = capfd.readouterr()
    _assert_nowhere(
        SENTINEL,
        out=out,
        texts={
            "stdout": captured.out,
            "stderr": captured.err,
            "logs": caplog.text,
            "lanes": result.lanes.to_json(),
            "params": repr(result.params),
        },
    )


def test_error_paths_never_quote_the_key(server, tmp_path):
    # a refused key
    wrong = SENTINEL + "-wrong"
    with pytest.raises(PermissionError) as refused:
        _sweep(server.base_url, tmp_path / "a", api_key=wrong, progress=False)
    # nothing listening
    with FaultServer() as gone:
        port = gone.port
    with pytest.raises(ConnectionError) as unreachable:
        _sweep(f"http://127.0.0.1:{port}", tmp_path / "b", api_key=SENTINEL, progress=False)
    # a bad argument next to the key
    with pytest.raises(ValueError) as bad_arg:
        _sweep(server.base_url, tmp_path / "c", api_key=SENTINEL, limits=(0,), progress=False)

    # the user's post-processing quoting the key in its own exception
    def leaky(lane):
        raise RuntimeError(f"rejected with token {SENTINEL}")

    result = _sweep(
        server.base_url,
        tmp_path / "d",
        api_key=SENTINEL,
        prompts=PROMPTS,
        postprocess=leaky,
        attempts=1,
        progress=False,
    )
    assert (result.lanes["outcome"] == "rejected").all()
    for exc in (refused.value, unreachable.value, bad_arg.value):
        text = f"{exc} {exc!r} {exc.__cause__!r} {exc.__context__!r}"
        assert SENTINEL not in text, f"{type(exc).__name__} quotes the key: {text}"
    assert not result.lanes["error"].str.contains(SENTINEL).any()
    assert not _files_containing(tmp_path, SENTINEL)


def test_scrape_metrics_sends_the_key_and_does_not_quote_it(server):
    frame = toolkit.scrape_metrics(f"{server.root_url}/metrics", api_key=SENTINEL)
    assert server.other_requests[-1]["authorization"] == f"Bearer {SENTINEL}"
    assert SENTINEL not in frame.to_json()
    with pytest.raises(Exception) as refused:
        toolkit.scrape_metrics(f"{server.root_url}/metrics", api_key=SENTINEL + "-wrong")
    assert SENTINEL not in f"{refused.value} {refused.value!r}"
