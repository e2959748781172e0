"""A loopback chat server that misbehaves on purpose, for the tests of issue 39 (secrets, time bounds,
token counts the server does not report, calibration lies).

It listens on 127.0.0.1 (a free port) and serves each connection in a daemon thread over HTTP/1.0, so
a streamed answer ends when the server closes the connection. Every wait inside it ends when the
server stops.

- ``hang``: paths (``/v1/models``, ``/tokenize`` ...) whose requests are read and never answered.
- ``echo``: every error path quotes the request's ``Authorization`` header after a run of filler
  characters: ``/v1/models``, ``/tokenize``, ``/metrics`` and ``/props`` answer HTTP 500 with it;
  streamed chat requests take the next of ``ECHO_PATHS`` x ``FILLER_LENGTHS`` in turn (an HTTP 500
  body, an SSE ``{"error": ...}`` chunk, a truncated SSE data line, a usage count that is text, or a
  normal answer). The calibration requests (``stream`` false) are answered normally.
- ``stream``: ``stream(n, body)`` gives the ``data:`` payloads of the n-th streamed answer (0-based),
  each a JSON-able object or a raw string; a ``None`` ends the answer by closing the connection
  without ``[DONE]``, an ``...`` (Ellipsis) stalls it until the server stops. Default:
  :func:`normal_stream`.
- ``tokens_per_word``: the calibration's ``usage.prompt_tokens`` is ``round(words * tokens_per_word)
  + TEMPLATE_TOKENS`` (a server that lies about prompt lengths sets it far from 1).

``chat`` records every streamed request as ``(time.monotonic(), body)`` in arrival order.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ECHO_PATHS = ("http_500", "sse_error", "sse_truncated", "usage_text", "ok")
FILLER_LENGTHS = (0, 1, 7, 150, 251, 280, 290, 295, 299, 300, 310, 1000, 1180, 1190, 1199, 2000)
FILLER = "~"
TEMPLATE_TOKENS = 3
TOKENS = 4
MODEL = "hostile-model"


def words(body: dict[str, Any]) -> int:
    """The prompt's words over every message."""
    return sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))


def normal_stream(n: int, body: dict[str, Any]) -> list[Any]:
    """A role chunk, ``TOKENS`` one-word chunks, a finish_reason, the usage chunk and ``[DONE]``."""
    chunks: list[Any] = [{"choices": [{"delta": {"role": "assistant"}}]}]
    chunks += [{"choices": [{"delta": {"content": f" w{i}"}}]} for i in range(TOKENS)]
    chunks.append({"choices": [{"delta": {}, "finish_reason": "length"}]})
    usage = {"prompt_tokens": words(body) + TEMPLATE_TOKENS, "completion_tokens": TOKENS}
    return [*chunks, {"choices": [], "usage": usage}, "[DONE]"]


class HostileServer:
    """See the module notes; use as a context manager."""

    def __init__(
        self,
        *,
        hang: tuple[str, ...] = (),
        echo: bool = False,
        stream: Callable[[int, dict[str, Any]], list[Any]] = normal_stream,
        tokens_per_word: float = 1.0,
        lifetime_s: float = 120.0,
    ) -> None:
        self.hang, self.echo, self.stream, self.tokens_per_word = set(hang), echo, stream, tokens_per_word
        self.chat: list[tuple[float, dict[str, Any]]] = []
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._lifetime_s = lifetime_s
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileServer:
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        threading.Timer(self._lifetime_s, self.stop).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if not self.stopped.is_set():
            self.stopped.set()
            self._httpd.shutdown()
            self._httpd.server_close()

    def echo_case(self, n: int) -> tuple[str, int]:
        """The error path and filler length of the n-th streamed request under ``echo``."""
        return ECHO_PATHS[n % len(ECHO_PATHS)], FILLER_LENGTHS[(n // len(ECHO_PATHS)) % len(FILLER_LENGTHS)]


def _handler(srv: HostileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _echo(self, filler: int) -> str:
            return FILLER * filler + "Authorization: " + self.headers.get("Authorization", "")

        def _serve(self, body: dict[str, Any]) -> None:
            path = self.path.split("?")[0]
            if path in srv.hang:
                srv.stopped.wait()
                return
            if path == "/v1/chat/completions":
                return self._chat(body)
            if srv.echo:
                return self._send(500, self._echo(FILLER_LENGTHS[-1]).encode(), "text/plain")
            if path == "/v1/models":
                return self._send(200, json.dumps({"data": [{"id": MODEL}]}).encode())
            self._send(404, b"not found", "text/plain")

        def do_GET(self) -> None:
            self._serve({})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._serve(json.loads(raw or b"{}"))

        def _chat(self, body: dict[str, Any]) -> None:
            if not body.get("stream"):
                prompt = round(words(body) * srv.tokens_per_word) + TEMPLATE_TOKENS
                answer = {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": prompt}}
                return self._send(200, json.dumps(answer).encode())
            with srv._lock:
                n = len(srv.chat)
                srv.chat.append((time.monotonic(), body))
            chunks = srv.stream(n, body)
            if srv.echo:
                where, filler = srv.echo_case(n)
                if where == "http_500":
                    return self._send(500, json.dumps({"error": {"message": self._echo(filler)}}).encode())
                if where == "sse_error":
                    chunks = [chunks[0], {"error": {"message": self._echo(filler)}}]
                elif where == "sse_truncated":
                    chunks = [chunks[0], '{"choices": [{"delta": {"content": "' + self._echo(filler)]
                elif where == "usage_text":
                    chunks = [*chunks[:-2], {"choices": [], "usage": {"completion_tokens": self._echo(filler)}}]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in chunks:
                if chunk is None:
                    return
                if chunk is ...:
                    srv.stopped.wait()
                    return
                data = chunk if isinstance(chunk, str) else json.dumps(chunk)
                self.wfile.write(f"data: {data}\n\n".encode())
                self.wfile.flush()

    return Handler
