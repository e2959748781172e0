"""One open conversation with a chat server: the client, its credentials, the model and prompt sizing."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from toolkit._sweep.files import split_credentials
from toolkit._sweep.filler import Filler, build_filler
from toolkit._sweep.plan import BearerAuth, _check_url
from toolkit._sweep.probe import _probe

__all__: list[str] = []

# The harness's connection pool. An idle connection is dropped after 2 s, before the server's own
# keep-alive timeout closes it (5 s in llama-server's cpp-httplib, CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND,
# and in uvicorn's --timeout-keep-alive default): with httpx's default of 5 s, a request sent on a
# connection the server is closing at that moment fails with "Server disconnected without sending a
# response" (as a replay against the local llama-server has).
CLIENT_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=2.0)


@dataclass
class _Session:
    """An open client to one server, its credentials, the model and how prompts are sized there."""

    client: httpx.AsyncClient
    auth: httpx.Auth | None
    secrets: tuple[str, ...]
    root: str
    model: str
    chat_url: str
    filler: Filler


@asynccontextmanager
async def session(
    base_url: str,
    model: str | None,
    api_key: str | None,
    timeout_s: float,
    seed: int,
    *,
    until: float = math.inf,
    bound: str = "",
) -> AsyncIterator[_Session]:
    """Open a client to ``base_url`` (credentials sent to its origin only), check it answers, pick the
    model and size prompts (:func:`toolkit._sweep.filler.build_filler`).

    ``until`` (``time.monotonic()``) is when the caller's own time bound, named ``bound``, runs out:
    the set-up (model probe, ``/tokenize`` probes, calibration requests) is cut there with a
    ``TimeoutError`` that names the bound and the step it was on."""
    url, auth, secrets = split_credentials(base_url)
    root = url.rstrip("/").removesuffix("/v1").rstrip("/")
    if api_key:
        secrets += (api_key,)
    auth = BearerAuth(api_key) if api_key else auth  # sent with base_url's requests only
    async with httpx.AsyncClient(
        headers={"Accept-Encoding": "identity"},
        timeout=httpx.Timeout(timeout_s),
        limits=CLIENT_LIMITS,
        trust_env=False,
    ) as client:
        step = "the model probe (/v1/models)"
        try:
            async with asyncio.timeout(None if math.isinf(until) else max(0.0, until - time.monotonic())):
                models = await _probe(client, root=root, model=model, auth=auth, timeout_s=timeout_s, secrets=secrets)
                model = model or models[0]
                chat_url = root + "/v1/chat/completions"
                step = "sizing prompts (the /tokenize probe and the calibration requests)"
                filler = await build_filler(client, root, chat_url, model, auth=auth, timeout_s=timeout_s, seed=seed)
        except TimeoutError:
            raise TimeoutError(f"{bound} ran out during set-up, in {step}; nothing was measured") from None
        yield _Session(client, auth, secrets, root, model, chat_url, filler)


def check_target(a: dict[str, Any]) -> dict[str, Any]:
    """The argument checks shared by the calls that talk to one chat server (``replay_trace``,
    ``profile``): a running ``server`` stands for its ``base_url`` (written back into ``a``);
    ``base_url`` (None starts a local llama-server), ``model`` and ``extra_body``. Returns
    ``extra_body`` as a dict."""
    if a["server"] is not None:
        if a["base_url"] is not None:
            raise ValueError("give base_url or server, not both")
        a["base_url"] = a["server"].base_url
    if a["base_url"] is not None:
        _check_url("base_url", a["base_url"], also="None (start a local llama-server)")
    if a["model"] is not None and (not isinstance(a["model"], str) or not a["model"]):
        raise ValueError(f"model must be a non-empty string or None, got {a['model']!r}")
    extra = a["extra_body"] or {}
    if not isinstance(extra, Mapping):
        raise ValueError(f"extra_body must be a mapping or None, got {type(extra).__name__}")
    return dict(extra)
