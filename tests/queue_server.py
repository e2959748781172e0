"""A loopback chat server that is one FIFO queue with a deterministic service time: an M/D/1 queue
under Poisson arrivals, whose waits are known in closed form.

Each streamed chat request is served in arrival order, one at a time, for exactly ``service_ms``; its
first token is sent when its service ends and the rest follow ``itl_ms`` apart, outside the queue (so
TTFT is the M/D/1 wait plus ``service_ms``). Service ends follow an absolute schedule (each starts at
the later of its arrival and the previous end), so the event loop's wake-up delays do not add up.
``degraded_itl_ms``, when given, replaces ``itl_ms`` for a request that starts streaming while more than
``degrade_above`` other answers are streaming: a server whose token rate collapses past a load.
A non-streamed request (the harness's prompt-length calibration) is answered at once, outside the
queue. A prompt costs one token per whitespace-separated word.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from streaming_server import StreamingServer, words


class QueueServer(StreamingServer):
    """Loopback M/D/1 server; use as a context manager."""

    def __init__(
        self,
        *,
        service_ms: float,
        itl_ms: float = 1.0,
        degraded_itl_ms: float | None = None,
        degrade_above: int = 0,
    ) -> None:
        super().__init__(metrics=False)
        self.service_ms, self.itl_ms = service_ms, itl_ms
        self.degraded_itl_ms, self.degrade_above = degraded_itl_ms, degrade_above
        self._free_at = 0.0  # when the server finishes the last request queued (loop time, s)
        self.streaming = 0

    async def _sleep_until(self, when: float) -> None:
        loop = asyncio.get_running_loop()
        # the loop's timers wake to the millisecond; the last 2 ms are slept in the thread
        await asyncio.sleep(max(0.0, when - loop.time() - 0.002))
        time.sleep(max(0.0, when - loop.time()))

    async def _chat(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        prompt = len(words(body))
        n = int(body.get("max_tokens", 16))
        usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "t " * n}
            choice = {"index": 0, "message": message, "finish_reason": "length"}
            await self._send(
                writer, 200, json.dumps({"object": "chat.completion", "choices": [choice], "usage": usage})
            )
            return
        loop = asyncio.get_running_loop()
        end = max(loop.time(), self._free_at) + self.service_ms / 1e3
        self._free_at = end
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")

        def event(payload: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps({"object": "chat.completion.chunk", **payload}).encode() + b"\n\n"

        writer.write(event({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}))
        await writer.drain()
        await self._sleep_until(end)
        degraded = self.degraded_itl_ms is not None and self.streaming > self.degrade_above
        itl = (self.degraded_itl_ms if degraded else self.itl_ms) / 1e3
        self.streaming += 1
        try:
            for i in range(n):
                if i:  # the loop's own timers: a blocking sleep here would delay every other stream
                    await asyncio.sleep(max(0.0, end + i * itl - loop.time()))
                writer.write(event({"choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]}))
                await writer.drain()
        finally:
            self.streaming -= 1
        writer.write(event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        writer.write(event({"choices": [], "usage": usage}))
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()
