"""The start-of-sweep probe: which models the server lists, bounded by its own timeout."""

from __future__ import annotations

import httpx

from toolkit._sweep.files import redact

__all__: list[str] = []


_PROBE_TIMEOUT_S = 10.0


async def _probe(
    client: httpx.AsyncClient, *, root: str, model: str | None, timeout_s: float, secrets: tuple[str, ...]
) -> list[str]:
    """Check that the server at ``root`` answers and return the model ids it lists (may be empty)."""
    url = root + "/v1/models"
    try:
        response = await client.get(url, timeout=min(timeout_s, _PROBE_TIMEOUT_S))
    except httpx.HTTPError as exc:
        raise ConnectionError(
            redact(f"nothing answered at {url} ({type(exc).__name__}); is the server running?", secrets)
        ) from None
    if response.status_code in (401, 403):
        raise PermissionError(
            redact(f"{url} refused the request (HTTP {response.status_code}); check api_key", secrets)
        )
    try:
        ids = [m["id"] for m in response.json().get("data", []) if isinstance(m, dict) and "id" in m]
    except (ValueError, AttributeError, TypeError):
        ids = []
    if model is None and not ids:
        raise ValueError(f"model is None but {redact(url, secrets)} lists no model; pass model=")
    return ids
