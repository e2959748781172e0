"""A loopback OpenAI-compatible streaming server whose timings and token counts are known exactly.

It runs an asyncio server on 127.0.0.1 (a free port) in a daemon thread. A chat request is answered
by a :class:`Script` (from ``script_for(body)``, default :func:`default_script`): a role-only chunk at
once, optionally an empty content delta, then the content chunks (one token each) with the scripted
sleeps, the usage chunk (with llama.cpp-style ``timings``) and ``data: [DONE]``. So for a script with
``ttft_s`` and ``itl_s`` and ``n`` tokens, a correct client measures TTFT >= ttft_s, E2E >= ttft_s +
(n - 1) * itl_s and TPOT >= itl_s, each exceeded only by loopback and scheduling delays.

Token counts are derivable by hand: a prompt costs one token per whitespace-separated word of all its
messages, and its cached part is the longest word prefix it shares with a prompt served earlier. The
``/metrics`` page exposes llama.cpp's counters (``llamacpp:prompt_tokens_total`` without the cached
tokens, ``llamacpp:prompt_tokens_cached_total``, ``llamacpp:tokens_predicted_total``), updated when an
answer completes, as llama-server does.

Run as a script (``python tests/streaming_server.py``) it serves instant streams until killed and
prints its port: the harness-overhead benchmark uses that, so the server's CPU is not the client's.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Script:
    """How to answer one chat request."""

    tokens: list[str]
    ttft_s: float = 0.0
    itl_s: float = 0.0
    empty_delta_s: float | None = None  # send {"content": ""} this long after the role chunk
    usage: bool = True
    prompt_tokens: int = 0
    cached_tokens: int | None = 0  # None leaves prompt_tokens_details out
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    error_body: str = ""
    usage_delay_s: float = 0.0


def words(body: dict[str, Any]) -> list[str]:
    """The prompt's tokens as this server counts them: whitespace-separated words of every message."""
    return [w for m in body.get("messages", []) for w in str(m.get("content", "")).split()]


class StreamingServer:
    """Loopback streaming server; use as a context manager.

    ``requests`` and ``headers`` record every chat request in arrival order; ``max_active`` is the
    largest number of chat streams that were open at once; ``counters`` feed ``/metrics``.
    """

    def __init__(
        self,
        *,
        tokens: int = 6,
        ttft_s: float = 0.0,
        itl_s: float = 0.0,
        script_for: Callable[[StreamingServer, dict[str, Any]], Script] | None = None,
        metrics: bool = True,
    ) -> None:
        self.tokens, self.ttft_s, self.itl_s = tokens, ttft_s, itl_s
        self.script_for = script_for or default_script
        self.metrics = metrics
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.counters = {"prompt": 0, "cached": 0, "predicted": 0}
        self.active = 0  # chat streams open right now
        self.max_active = 0  # the most that were ever open at once
        self._seen: list[list[str]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cached_prefix(self, prompt: list[str]) -> int:
        """Longest word prefix ``prompt`` shares with any earlier prompt; then remember it."""
        with self._lock:
            best = 0
            for seen in self._seen:
                n = 0
                for a, b in zip(seen, prompt):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            self._seen.append(prompt)
            return best

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> StreamingServer:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("test server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def close() -> None:
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)

    # -- HTTP --------------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            body = await reader.readexactly(int(headers.get("content-length", 0)))
            if method == "GET" and path == "/v1/models":
                await self._send(writer, 200, json.dumps({"object": "list", "data": [{"id": "test-model"}]}))
            elif method == "GET" and path == "/metrics" and self.metrics:
                await self._send(writer, 200, self.metrics_text(), "text/plain; version=0.0.4")
            elif method == "POST" and path == "/v1/chat/completions":
                request = json.loads(body)
                with self._lock:
                    self.requests.append(request)
                    self.headers.append(headers)
                    self.active += 1
                    self.max_active = max(self.max_active, self.active)
                try:
                    await self._chat(writer, request)
                finally:
                    with self._lock:
                        self.active -= 1
            else:
                await self._send(writer, 404, json.dumps({"error": "not found"}))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        text: str,
        ctype: str = "application/json",
        extra: dict[str, str] | None = None,
    ) -> None:
        data = text.encode()
        head = [f"HTTP/1.1 {status} X", f"Content-Type: {ctype}", f"Content-Length: {len(data)}", "Connection: close"]
        head += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        await writer.drain()

    async def _chat(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        script = self.script_for(self, body)
        if script.status != 200:
            await self._send(writer, script.status, script.error_body, extra=script.headers)
            return
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        writer.write(head.encode())

        def event(delta: dict | None = None, *, finish: str | None = None, usage: dict | None = None) -> bytes:
            chunk: dict[str, Any] = {"object": "chat.completion.chunk", "model": body.get("model")}
            chunk["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
            if usage is not None:
                chunk.update(usage)
            return b"data: " + json.dumps(chunk).encode() + b"\n\n"

        writer.write(event({"role": "assistant", "content": None}))
        await writer.drain()
        waited = 0.0
        if script.empty_delta_s is not None:
            await asyncio.sleep(script.empty_delta_s)
            waited = script.empty_delta_s
            writer.write(event({"content": ""}))
            await writer.drain()
        for i, token in enumerate(script.tokens):
            pause = max(0.0, script.ttft_s - waited) if i == 0 else script.itl_s
            if pause:
                await asyncio.sleep(pause)
            writer.write(event({"content": token}))
            if pause or i % 64 == 63:
                await writer.drain()
        writer.write(event({}, finish="length"))
        if script.usage_delay_s:
            await writer.drain()
            await asyncio.sleep(script.usage_delay_s)
        n = len(script.tokens)
        if script.usage:
            usage: dict[str, Any] = {
                "completion_tokens": n,
                "prompt_tokens": script.prompt_tokens,
                "total_tokens": n + script.prompt_tokens,
            }
            if script.cached_tokens is not None:
                usage["prompt_tokens_details"] = {"cached_tokens": script.cached_tokens}
            timings = {
                "predicted_n": n,
                "predicted_ms": n * script.itl_s * 1000,
                "predicted_per_token_ms": script.itl_s * 1000,
                "prompt_n": script.prompt_tokens,
                "cache_n": script.cached_tokens or 0,
            }
            writer.write(event(usage={"usage": usage, "timings": timings}))
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()
        with self._lock:
            self.counters["prompt"] += script.prompt_tokens - (script.cached_tokens or 0)
            self.counters["cached"] += script.cached_tokens or 0
            self.counters["predicted"] += n

    def metrics_text(self) -> str:
        """The /metrics page: llama.cpp's names and types."""
        with self._lock:
            c = dict(self.counters)
        rows = [
            ("llamacpp:prompt_tokens_total", c["prompt"]),
            ("llamacpp:prompt_tokens_cached_total", c["cached"]),
            ("llamacpp:tokens_predicted_total", c["predicted"]),
        ]
        return "".join(f"# TYPE {name} counter\n{name} {value}\n" for name, value in rows)


def default_script(server: StreamingServer, body: dict[str, Any]) -> Script:
    """``server.tokens`` tokens (at most max_tokens) with the server's ttft_s / itl_s."""
    prompt = words(body)
    n = min(server.tokens, int(body.get("max_tokens", server.tokens)))
    return Script(
        tokens=[f"t{i} " for i in range(n)],
        ttft_s=server.ttft_s,
        itl_s=server.itl_s,
        prompt_tokens=len(prompt),
        cached_tokens=server.cached_prefix(prompt),
    )


if __name__ == "__main__":
    import sys
    import time

    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    with StreamingServer(tokens=tokens, metrics=True) as srv:
        print(srv.port, flush=True)
        while True:
            time.sleep(3600)
