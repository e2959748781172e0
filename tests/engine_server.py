"""A loopback chat server that batches like a serving engine, with step times from known coefficients.

A request waits ``request_ms`` (its fixed cost outside the engine: parsing, tokenising), then joins
the engine's queue. One engine task runs steps one after another, continuous batching as llama.cpp
and vLLM do: each step decodes one token for each of the ``n`` running sequences (holding ``K``
tokens in total, prompt plus tokens generated so far) and prefills every waiting prompt (``P``
tokens in total), and takes ``a_ms + b_ms * n + c_ms * K + e_ms * P``. A prefilled request streams
its first token at the end of its step, a running one its next token. A prompt alone therefore
waits ``d = request_ms + a_ms`` plus ``e_ms`` per prompt token for its first token. ``extra_ms``
(none by default), a function of the number of sequences decoding, adds its value to each step: a
server whose step time does not follow the cost model's shape. ``step_fn`` (none by default), a
function of ``(n, K, P, prompts)``, replaces the whole ``a + b n + c K + e P`` when given: a server
whose every step takes what a known cost model says (``CostModel.step_ms(n, K, P, 0, prompts)``).

Step ends follow an absolute schedule (each end is the previous end plus the step's duration), so the
event loop's wake-up delays do not accumulate into the measured TPOT. A prompt costs one token per
whitespace-separated word; nothing is cached. Built on :class:`tests.streaming_server.StreamingServer`
for the HTTP side and ``/v1/models``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streaming_server import StreamingServer, words


@dataclass
class _Sequence:
    prompt: int
    remaining: int
    tokens: asyncio.Queue = field(default_factory=asyncio.Queue)
    generated: int = 0


class EngineServer(StreamingServer):
    """Loopback engine with step time ``a + b n + c K + e P`` ms and ``request_ms`` before the queue."""

    def __init__(
        self,
        *,
        a_ms: float,
        b_ms: float,
        c_ms: float,
        e_ms: float,
        request_ms: float,
        extra_ms: Callable[[int], float] | None = None,
        step_fn: Callable[[int, int, int, int], float] | None = None,
    ) -> None:
        super().__init__(metrics=False)
        self.a_ms, self.b_ms, self.c_ms, self.e_ms = a_ms, b_ms, c_ms, e_ms
        self.extra_ms = extra_ms
        self.step_fn = step_fn
        self.request_ms = request_ms
        self._waiting: list[_Sequence] = []
        self._running: list[_Sequence] = []
        self._wake: asyncio.Event | None = None
        self._engine: asyncio.Task | None = None

    async def _run_engine(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        end = loop.time()
        while True:
            if not self._waiting and not self._running:
                self._wake.clear()
                await self._wake.wait()
                end = loop.time()
            new, self._waiting = self._waiting, []
            held = sum(s.prompt + s.generated for s in self._running)
            prefill = sum(s.prompt for s in new)
            if self.step_fn is not None:
                step_ms = self.step_fn(len(self._running), held, prefill, len(new))
            else:
                step_ms = self.a_ms + self.b_ms * len(self._running) + self.c_ms * held + self.e_ms * prefill
                step_ms += self.extra_ms(len(self._running)) if self.extra_ms else 0.0
            end += step_ms / 1e3
            # the loop's timers wake to the millisecond (epoll), which would alternate long and short
            # steps; the last 2 ms are slept in the thread, to the microsecond
            await asyncio.sleep(max(0.0, end - loop.time() - 0.002))
            time.sleep(max(0.0, end - loop.time()))
            self._running += new
            for seq in self._running:
                seq.generated += 1
                seq.remaining -= 1
                seq.tokens.put_nowait(f"t{seq.generated} ")
            self._running = [s for s in self._running if s.remaining > 0]
            end = max(end, loop.time() - 0.002)  # a late wake-up may not be made up by shorter steps

    async def _chat(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        if self._engine is None:
            self._wake = asyncio.Event()
            self._engine = asyncio.create_task(self._run_engine())
        prompt = len(words(body))
        n = int(body.get("max_tokens", 16))
        seq = _Sequence(prompt=prompt, remaining=n)
        await asyncio.sleep(self.request_ms / 1e3)
        self._waiting.append(seq)
        self._wake.set()
        usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        if not body.get("stream"):
            text = "".join([await seq.tokens.get() for _ in range(n)])
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "finish_reason": "length"}
            await self._send(
                writer, 200, json.dumps({"object": "chat.completion", "choices": [choice], "usage": usage})
            )
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")

        def event(payload: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps({"object": "chat.completion.chunk", **payload}).encode() + b"\n\n"

        writer.write(event({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}))
        await writer.drain()
        for _ in range(n):
            token = await seq.tokens.get()
            writer.write(event({"choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}]}))
            await writer.drain()
        writer.write(event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        writer.write(event({"choices": [], "usage": usage}))
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()
