"""One open conversation with a chat server: the client, its credentials, the model and prompt sizing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from toolkit._sweep.files import split_credentials
from toolkit._sweep.filler import Filler, build_filler
from toolkit._sweep.plan import BearerAuth
from toolkit._sweep.probe import _probe

__all__: list[str] = []


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
    base_url: str, model: str | None, api_key: str | None, timeout_s: float, seed: int
) -> AsyncIterator[_Session]:
    """Open a client to ``base_url`` (credentials sent to its origin only), check it answers, pick the
    model and size prompts (:func:`toolkit._sweep.filler.build_filler`)."""
    url, auth, secrets = split_credentials(base_url)
    root = url.rstrip("/").removesuffix("/v1").rstrip("/")
    if api_key:
        secrets += (api_key,)
    auth = BearerAuth(api_key) if api_key else auth  # sent with base_url's requests only
    async with httpx.AsyncClient(
        headers={"Accept-Encoding": "identity"},
        timeout=httpx.Timeout(timeout_s),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        trust_env=False,
    ) as client:
        models = await _probe(client, root=root, model=model, auth=auth, timeout_s=timeout_s, secrets=secrets)
        model = model or models[0]
        chat_url = root + "/v1/chat/completions"
        filler = await build_filler(client, root, chat_url, model, auth=auth, timeout_s=timeout_s, seed=seed)
        yield _Session(client, auth, secrets, root, model, chat_url, filler)
