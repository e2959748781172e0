"""The start-of-sweep probe: which models the server lists, bounded by its own timeout."""

from __future__ import annotations

import json

import httpx

from toolkit._sweep.bounded import MAX_METRICS_BYTES, BodyTooLarge, fetch
from toolkit._sweep.files import redact

__all__: list[str] = []


_PROBE_TIMEOUT_S = 10.0


async def _probe(
    client: httpx.AsyncClient,
    *,
    root: str,
    model: str | None,
    auth: httpx.Auth | None,
    timeout_s: float,
    secrets: tuple[str, ...],
) -> list[str]:
    """Check that the server at ``root`` answers and return the model ids it lists (may be empty)."""
    url = root + "/v1/models"
    limit_s = min(timeout_s, _PROBE_TIMEOUT_S)
    try:
        status, body = await fetch(
            client, "GET", url, max_bytes=MAX_METRICS_BYTES, timeout_s=limit_s, auth=auth or httpx.USE_CLIENT_DEFAULT
        )
    except TimeoutError:
        raise ConnectionError(redact(f"{url} did not answer within {limit_s:g} s", secrets)) from None
    except BodyTooLarge as exc:
        raise ConnectionError(redact(f"{url} sent an unusable answer: {exc}", secrets)) from None
    except httpx.HTTPError as exc:
        raise ConnectionError(
            redact(f"nothing answered at {url} ({type(exc).__name__}); is the server running?", secrets)
        ) from None
    if status in (401, 403):
        raise PermissionError(redact(f"{url} refused the request (HTTP {status}); check api_key", secrets))
    try:
        ids = [
            m["id"] for m in json.loads(body).get("data", []) if isinstance(m, dict) and isinstance(m.get("id"), str)
        ]
    except (ValueError, AttributeError, TypeError, RecursionError):
        ids = []
    if model is None and not ids:
        raise ValueError(f"model is None but {redact(url, secrets)} lists no model; pass model=")
    return ids
