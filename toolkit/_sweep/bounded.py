"""Reading a server's answer with bounded memory, whatever the server sends.

A benchmark client must not be the thing that falls over: a line without a newline, a gzip bomb or
a ``/metrics`` page of millions of series would otherwise be held in memory whole. Every body the
sweep and the replay read goes through here, with these caps (each breach is an error of its own
request or scrape, never of the sweep):

- ``MAX_LINE_BYTES`` (1 MiB): one SSE line. A chunk of a streamed completion is a few hundred bytes.
- ``MAX_STREAM_BYTES`` (64 MiB): a whole streamed answer after decompression (a 32k-token answer is
  about 8 MB of SSE).
- ``MAX_METRICS_BYTES`` (16 MiB): a ``/metrics`` page after decompression.
- ``MAX_EXCERPT_BYTES`` (4 KiB): what is read of an error body.

Bodies are read raw and decompressed here (gzip and deflate; the client asks for ``identity``), at
most ``_STEP`` bytes of output per call, so a small compressed body cannot expand in one step.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Iterator

import httpx

__all__: list[str] = []

MAX_LINE_BYTES = 1 << 20
MAX_STREAM_BYTES = 64 << 20
MAX_METRICS_BYTES = 16 << 20
MAX_EXCERPT_BYTES = 4 << 10
_STEP = 64 << 10


class BodyTooLarge(Exception):
    """A body or line over its cap; the message says which cap."""


def _decompressor(response: httpx.Response) -> zlib._Decompress | None:
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise BodyTooLarge(f"unsupported Content-Encoding {encoding[:40]!r} (the client asked for identity)")


def _inflate(decompressor: zlib._Decompress, raw: bytes) -> Iterator[bytes]:
    piece = decompressor.decompress(raw, _STEP)
    yield piece
    while decompressor.unconsumed_tail:
        yield decompressor.decompress(decompressor.unconsumed_tail, _STEP)


async def decoded(response: httpx.Response, *, max_bytes: int) -> AsyncIterator[bytes]:
    """The body's bytes after decompression, at most ``max_bytes`` of them (else ``BodyTooLarge``)."""
    if response.is_stream_consumed:  # read into memory before us (httpx.MockTransport): decoded already
        if len(response.content) > max_bytes:
            raise BodyTooLarge(f"the body is larger than {max_bytes:,} bytes")
        yield response.content
        return
    try:
        decompressor = _decompressor(response)
        total = 0
        async for raw in response.aiter_raw():
            for piece in [raw] if decompressor is None else _inflate(decompressor, raw):
                total += len(piece)
                if total > max_bytes:
                    raise BodyTooLarge(f"the body is larger than {max_bytes:,} bytes")
                yield piece
    except zlib.error as exc:
        raise BodyTooLarge(f"the body does not decompress ({exc})") from None


async def lines(
    response: httpx.Response, *, max_line_bytes: int = MAX_LINE_BYTES, max_bytes: int = MAX_STREAM_BYTES
) -> AsyncIterator[str]:
    """The body's lines (``\\n`` or ``\\r\\n``), each at most ``max_line_bytes``, decoded as UTF-8."""
    buffer = bytearray()
    async for piece in decoded(response, max_bytes=max_bytes):
        buffer += piece
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            yield bytes(buffer[start:end]).rstrip(b"\r").decode("utf-8", "replace")
            start = end + 1
        del buffer[:start]
        if len(buffer) > max_line_bytes:
            raise BodyTooLarge(f"a line is longer than {max_line_bytes:,} bytes")
    if buffer:
        yield bytes(buffer).rstrip(b"\r").decode("utf-8", "replace")


async def read_body(response: httpx.Response, *, max_bytes: int) -> bytes:
    """The whole body, at most ``max_bytes`` after decompression (else ``BodyTooLarge``)."""
    out = bytearray()
    async for piece in decoded(response, max_bytes=max_bytes):
        out += piece
    return bytes(out)


async def excerpt(response: httpx.Response, *, max_bytes: int = MAX_EXCERPT_BYTES) -> str:
    """The start of an error body (up to ``max_bytes``), decoded; never raises on a bad body."""
    out = bytearray()
    try:
        async for piece in decoded(response, max_bytes=1 << 62):
            out += piece
            if len(out) >= max_bytes:
                break
    except (BodyTooLarge, httpx.HTTPError):
        pass
    return bytes(out[:max_bytes]).decode("utf-8", "replace")


async def fetch(
    client: httpx.AsyncClient, method: str, url: str, *, max_bytes: int, timeout_s: float, **kwargs: object
) -> tuple[int, bytes]:
    """(status, body) of one request, the whole of it within ``timeout_s`` (``TimeoutError``) and
    the body within ``max_bytes`` (``BodyTooLarge``); other failures are ``httpx.HTTPError``."""
    async with asyncio.timeout(timeout_s):
        async with client.stream(method, url, **kwargs) as response:
            return response.status_code, await read_body(response, max_bytes=max_bytes)
