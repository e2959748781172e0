"""A fault-injecting OpenAI-compatible chat server for the reliability tests.

It listens on 127.0.0.1 (a free port), serves each connection in a daemon thread and stops by itself:
on ``stop()``, on leaving its ``with`` block, or after ``lifetime_s`` at the latest. Every wait inside it
(a stall, a per-token delay) is bounded and ends early when the server stops.

A normal request gets a streamed chat completion: a role-only chunk, ``tokens`` content chunks of one
word each, a usage chunk (``prompt_tokens``, ``completion_tokens``,
``prompt_tokens_details.cached_tokens``) and ``data: [DONE]``. Token counts are simple enough to derive
by hand: a prompt costs one token per whitespace-separated word of every message, and the cached part
is the longest word prefix it shares with any prompt served before it.

A fault is chosen per request, first by a marker in the prompt and otherwise from ``schedule``:

- ``[[fault:NAME]]`` applies NAME to every request carrying that prompt;
- ``[[fault:NAME*K]]`` applies it to the first K requests carrying that exact prompt, then serves
  normally (so a retry, or a resumed run, succeeds);
- ``schedule`` is a list of fault names (``None`` for a normal answer) consumed in arrival order by
  requests that carry no marker.

``[[tokens:N]]`` in a prompt sets the completion length for that request. The fault
``hostile_usage`` sends ``usage_text`` verbatim as the data of the last chunk instead of the usage
chunk (absurd numbers, wrong types, deep nesting: text Python's json module may refuse to produce or
to read).

Faults: ``500`` (JSON error body ``error_message``), ``429`` (``Retry-After: retry_after_s``),
``reset`` (a TCP reset after the first content chunk), ``stall`` (nothing at all is sent),
``stall_mid`` (silence after the first content chunk), ``malformed`` (a truncated JSON ``data:`` line
among the chunks), ``no_usage`` (the usage chunk is left out) and ``empty`` (no content, zero
completion tokens). Hostile transports: ``trickle`` (after the role chunk, one byte every
``trickle_s`` until the server stops), ``huge_line`` (``huge_bytes`` bytes of ``data:`` without a
newline, streamed), ``gzip_bomb`` (``Content-Encoding: gzip`` over ``huge_bytes`` of zeros compressed
about a thousandfold) and ``redirect`` (307 to ``redirect_to``).

``/metrics`` (``metrics_mode``): ``ok`` exposes ``llamacpp:prompt_tokens_total`` (prompt tokens
evaluated, the cached ones excluded, as llama-server counts them) and
``llamacpp:prompt_tokens_cached_total``; ``absent`` answers 404; ``malformed`` answers text that is not
the Prometheus exposition format; ``nan`` exposes NaN counters; ``trickle`` sends one byte every
``trickle_s``; ``huge`` sends ``huge_bytes`` of comment lines. ``reset_metrics_at_request=N`` zeroes both counters when the N-th chat
request arrives, as a server restart would.
"""

from __future__ import annotations

import io
import json
import re
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = (
    "500",
    "429",
    "reset",
    "stall",
    "stall_mid",
    "malformed",
    "no_usage",
    "empty",
    "hostile_usage",
    "trickle",
    "huge_line",
    "gzip_bomb",
    "redirect",
)
_MARKER = re.compile(r"\[\[fault:([a-z0-9_]+)(?:\*(\d+))?\]\]")
_TOKENS = re.compile(r"\[\[tokens:(\d+)\]\]")


class FaultServer:
    """A loopback OpenAI-compatible server whose answers can be broken on purpose.

    Parameters
    ----------
    tokens : int
        Content chunks (one completion token each) in a normal answer, capped by ``max_tokens``.
    token_delay_s : float
        Pause before each content chunk.
    stall_s : float
        How long ``stall`` and ``stall_mid`` stay silent (cut short when the server stops).
    retry_after_s : int
        The ``Retry-After`` header of a 429 answer, in seconds.
    error_message : str
        The message in the JSON body of 500 and 429 answers.
    echo_authorization : bool
        Put the request's Authorization header into error bodies, as a careless proxy would.
    require_key : str or None
        When set, every request without ``Authorization: Bearer <require_key>`` gets a 401.
    metrics_mode : str
        ``ok``, ``absent`` or ``malformed``.
    reset_metrics_at_request : int or None
        Zero the /metrics counters when this (1-based) chat request arrives.
    schedule : list of str or None
        Faults for requests without a marker, in arrival order.
    lifetime_s : float
        Hard limit after which the server stops itself.
    """

    def __init__(
        self,
        *,
        tokens: int = 6,
        token_delay_s: float = 0.002,
        stall_s: float = 30.0,
        retry_after_s: int = 1,
        error_message: str = "injected server error",
        echo_authorization: bool = False,
        require_key: str | None = None,
        metrics_mode: str = "ok",
        reset_metrics_at_request: int | None = None,
        schedule: list[str | None] | None = None,
        lifetime_s: float = 180.0,
        usage_text: str | None = None,
        trickle_s: float = 1.0,
        huge_bytes: int = 64 << 20,
        redirect_to: str = "",
    ) -> None:
        self.tokens = tokens
        self.token_delay_s = token_delay_s
        self.stall_s = stall_s
        self.retry_after_s = retry_after_s
        self.error_message = error_message
        self.echo_authorization = echo_authorization
        self.require_key = require_key
        self.metrics_mode = metrics_mode
        self.reset_metrics_at_request = reset_metrics_at_request
        self.schedule = list(schedule or [])
        self.lifetime_s = lifetime_s
        self.usage_text = usage_text
        self.trickle_s = trickle_s
        self.huge_bytes = huge_bytes
        self.redirect_to = redirect_to
        self.requests: list[dict[str, Any]] = []  # one record per chat request
        self.other_requests: list[dict[str, Any]] = []  # probes, /models, /metrics ...
        self.prompt_tokens_total = 0
        self.cached_tokens_total = 0
        self._seen_prompts: list[list[str]] = []
        self._marker_counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []  # exceptions inside the server itself (a bug here, not a fault)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FaultServer:
        handler = type("_Handler", (_Handler,), {"fault_server": self})
        self._httpd = _HTTPServer(("127.0.0.1", 0), handler)
        self._httpd.errors = self.errors
        self._httpd.daemon_threads = True
        serve = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        watchdog = threading.Thread(target=self._expire, daemon=True)
        self._threads = [serve, watchdog]
        for t in self._threads:
            t.start()
        return self

    def _expire(self) -> None:
        if not self._stop.wait(self.lifetime_s):
            self.stop()

    def stop(self) -> None:
        self._stop.set()
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    # -- bookkeeping ---------------------------------------------------------------------------
    def chat_requests(self, prompt_contains: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            reqs = list(self.requests)
        if prompt_contains is not None:
            reqs = [r for r in reqs if prompt_contains in r["prompt"]]
        return reqs

    def reset_metrics(self) -> None:
        with self._lock:
            self.prompt_tokens_total = 0
            self.cached_tokens_total = 0

    def _admit(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """Record a chat request and decide its fault and token counts."""
        messages = body.get("messages") or []
        texts = [str(m.get("content", "")) for m in messages if isinstance(m, dict)]
        prompt = "\n".join(texts)
        words = prompt.split()
        with self._lock:
            n = len(self.requests) + 1
            if self.reset_metrics_at_request == n:
                self.prompt_tokens_total = 0
                self.cached_tokens_total = 0
            fault = None
            marker = _MARKER.search(prompt)
            if marker:
                name, limit = marker.group(1), marker.group(2)
                count = self._marker_counts.get(prompt, 0) + 1
                self._marker_counts[prompt] = count
                if limit is None or count <= int(limit):
                    fault = name
            elif self.schedule:
                fault = self.schedule.pop(0)
            cached = max((_common_prefix(words, seen) for seen in self._seen_prompts), default=0)
            cached = min(cached, max(len(words) - 1, 0))  # the last prompt token is always computed
            tokens_marker = _TOKENS.search(prompt)
            tokens = int(tokens_marker.group(1)) if tokens_marker else self.tokens
            if isinstance(body.get("max_tokens"), int):
                tokens = min(tokens, body["max_tokens"])
            record = {
                "n": n,
                "t": time.monotonic(),
                "path": headers.get(":path", ""),
                "prompt": prompt,
                "fault": fault,
                "authorization": headers.get("authorization"),
                "stream": bool(body.get("stream")),
                "include_usage": bool((body.get("stream_options") or {}).get("include_usage")),
                "prompt_tokens": len(words),
                "cached_tokens": cached,
                "completion_tokens": 0 if fault == "empty" else tokens,
                "finished": False,
            }
            self.requests.append(record)
            if fault not in ("500", "429", "stall"):
                # the server has read the prompt: its own counters move, as llama-server's do
                self._seen_prompts.append(words)
                self.prompt_tokens_total += len(words) - cached
                self.cached_tokens_total += cached
        return record

    def metrics_text(self) -> str:
        with self._lock:
            prompt, cached = self.prompt_tokens_total, self.cached_tokens_total
        return (
            "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
            "# TYPE llamacpp:prompt_tokens_total counter\n"
            f"llamacpp:prompt_tokens_total {prompt}\n"
            "# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens served from cache.\n"
            "# TYPE llamacpp:prompt_tokens_cached_total counter\n"
            f"llamacpp:prompt_tokens_cached_total {cached}\n"
        )

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when the server stopped meanwhile."""
        return self._stop.wait(seconds)


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class _HTTPServer(ThreadingHTTPServer):
    errors: list[str]

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):  # a client hanging up is not the server's error
            self.errors.append(repr(exc))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fault_server: FaultServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
        pass

    def _refused(self) -> bool:
        """Answer 401 (and say so) when the server wants a key this request lacks."""
        key = self.fault_server.require_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return False
        self._json(401, {"error": {"message": "invalid api key", "type": "authentication_error"}})
        return True

    # -- plain endpoints -----------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        srv = self.fault_server
        with srv._lock:
            srv.other_requests.append(
                {"method": "GET", "path": self.path, "authorization": self.headers.get("Authorization")}
            )
        if self._refused():
            return
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/metrics"):
            if srv.metrics_mode == "absent":
                self._send(404, b"not found\n", "text/plain")
            elif srv.metrics_mode == "malformed":
                self._send(200, b"llamacpp:prompt_tokens_total {{{ not a number\n\x00garbage\n", "text/plain")
            elif srv.metrics_mode == "nan":
                self._send(
                    200, b"llamacpp:prompt_tokens_total NaN\nllamacpp:tokens_predicted_total NaN\n", "text/plain"
                )
            elif srv.metrics_mode in ("trickle", "huge"):
                self._chunked_head(200, "text/plain")
                if srv.metrics_mode == "trickle":
                    while not srv.wait(srv.trickle_s):
                        self._raw(b"#")
                else:
                    line = b"# " + b"x" * 1021 + b"\n"
                    for _ in range(srv.huge_bytes // len(line)):
                        self._raw(line * 64)
                self.wfile.write(b"0\r\n\r\n")
            else:
                self._send(200, srv.metrics_text().encode(), "text/plain; version=0.0.4")
        elif path.endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "fault-model", "object": "model"}]})
        elif path in ("", "/health", "/v1", "/v1/health"):
            self._json(200, {"status": "ok"})
        else:
            self._json(404, {"error": {"message": "no such route"}})

    def do_POST(self) -> None:  # noqa: N802
        srv = self.fault_server
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self.path.split("?")[0].rstrip("/").endswith("/chat/completions"):
            with srv._lock:
                srv.other_requests.append(
                    {"method": "POST", "path": self.path, "authorization": self.headers.get("Authorization")}
                )
            self._json(404, {"error": {"message": "no such route"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._json(400, {"error": {"message": "request body is not JSON"}})
            return
        if self._refused():
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        headers[":path"] = self.path
        rec = srv._admit(body, headers)
        fault = rec["fault"]
        try:
            if fault in ("500", "429"):
                self._error(rec)
            elif fault in ("trickle", "huge_line", "gzip_bomb", "redirect"):
                self._hostile(rec)
            elif fault == "stall":
                srv.wait(srv.stall_s)
                self.close_connection = True
            elif not rec["stream"]:
                self._plain(rec)
            else:
                self._stream(rec)
        except OSError:  # the client went away (a timeout, a cancelled lane): nothing to answer
            self.close_connection = True

    # -- answers -------------------------------------------------------------------------------
    def _error(self, rec: dict[str, Any]) -> None:
        srv = self.fault_server
        message = srv.error_message
        if srv.echo_authorization:
            message = f"{message} (request had Authorization: {rec['authorization']})"
        status = int(rec["fault"])
        payload = json.dumps({"error": {"message": message, "type": "server_error", "code": status}}).encode()
        self.send_response(status)
        if status == 429:
            self.send_header("Retry-After", str(srv.retry_after_s))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        rec["finished"] = True

    def _plain(self, rec: dict[str, Any]) -> None:
        text = "".join(f"tok{i} " for i in range(rec["completion_tokens"]))
        self._json(
            200,
            {
                "id": f"chatcmpl-{rec['n']}",
                "object": "chat.completion",
                "model": "fault-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": _usage(rec),
            },
        )
        rec["finished"] = True

    def _stream(self, rec: dict[str, Any]) -> None:
        srv = self.fault_server
        fault = rec["fault"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict | None = None) -> dict:
            choices = [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish}]
            out = {
                "id": f"chatcmpl-{rec['n']}",
                "object": "chat.completion.chunk",
                "model": "fault-model",
                "choices": choices,
            }
            if usage is not None:
                out["usage"] = usage
            return out

        self._event(chunk({"role": "assistant", "content": ""}))
        if fault == "empty":
            self._event(chunk({"content": ""}, finish="stop"))
        else:
            for i in range(rec["completion_tokens"]):
                if srv.wait(srv.token_delay_s):
                    return
                if fault == "malformed" and i == 1:
                    self._raw(b'data: {"id": "broken", "choices": [{"delta": {"content": "tok\n\n')
                last = i == rec["completion_tokens"] - 1
                self._event(chunk({"content": f"tok{i} "}, finish="stop" if last else None))
                if i == 0 and fault == "reset":
                    self._reset()
                    return
                if i == 0 and fault == "stall_mid":
                    srv.wait(srv.stall_s)
                    self.close_connection = True
                    return
        if fault == "hostile_usage":
            self._raw(b"data: " + srv.usage_text.encode() + b"\n\n")
        elif fault != "no_usage" and rec["include_usage"]:
            self._event(chunk({}, usage=_usage(rec)))
        self._raw(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        rec["finished"] = True

    def _hostile(self, rec: dict[str, Any]) -> None:
        srv = self.fault_server
        fault = rec["fault"]
        if fault == "redirect":
            self.send_response(307)
            self.send_header("Location", srv.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._chunked_head(200, "text/event-stream", gzip=fault == "gzip_bomb")
        if fault == "trickle":
            self._raw(b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n')
            while not srv.wait(srv.trickle_s):
                self._raw(b" ")
        elif fault == "huge_line":
            self._raw(b"data: ")
            block = b"x" * (1 << 20)
            for _ in range(srv.huge_bytes >> 20):
                self._raw(block)
        else:
            for block in _gzip_zeros(srv.huge_bytes):
                self._raw(block)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunked_head(self, status: int, content_type: str, gzip: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        if gzip:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()

    # -- wire helpers --------------------------------------------------------------------------
    def _event(self, obj: dict[str, Any]) -> None:
        self._raw(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def _raw(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _reset(self) -> None:
        """Abort the connection with a TCP RST (SO_LINGER 0), not an orderly close."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # the descriptor really closes only once the socket and both of its file objects are closed
        self.rfile.close()
        self.wfile.close()
        self.connection.close()
        self.wfile = io.BytesIO()  # the base class flushes wfile after every request

    def _json(self, status: int, obj: dict[str, Any]) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


_GZIP_CACHE: dict[int, list[bytes]] = {}


def _gzip_zeros(size: int) -> list[bytes]:
    """``size`` zero bytes gzip-compressed (about 1,000:1), in blocks; computed once per size."""
    if size not in _GZIP_CACHE:
        import zlib

        comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        zeros = bytes(1 << 20)
        blocks = [comp.compress(zeros) for _ in range(size >> 20)] + [comp.flush()]
        _GZIP_CACHE[size] = [b for b in blocks if b]
    return _GZIP_CACHE[size]


def _usage(rec: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt_tokens": rec["prompt_tokens"],
        "completion_tokens": rec["completion_tokens"],
        "total_tokens": rec["prompt_tokens"] + rec["completion_tokens"],
        "prompt_tokens_details": {"cached_tokens": rec["cached_tokens"]},
    }
