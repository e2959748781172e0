"""Shared fixtures. ``llama_server``: one real llama-server for the whole session (tests marked ``server``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def llama_server():
    """A running llama-server (Gemma-3-270M Q4_K_M, ``--parallel 8 --metrics``, loopback, a free port).

    Fails, never skips, when the binary or model is missing: ``make test`` installs both, so a missing
    binary is a broken setup that must be seen.
    """
    from toolkit import LlamaServer

    server = LlamaServer(parallel=8)
    try:
        server.start()
    except (FileNotFoundError, RuntimeError, TimeoutError) as exc:
        pytest.fail(f"could not start the real llama-server: {exc}", pytrace=False)
    yield server
    server.stop()
