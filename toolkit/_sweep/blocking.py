"""Running a coroutine to completion from synchronous code, also inside a notebook's running loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__: list[str] = []

T = TypeVar("T")


def run_blocking(make: Callable[[], Coroutine[Any, Any, T]], name: str) -> T:
    """Run ``make()`` on a fresh event loop and return its result (or raise its exception).

    With no loop running (a script) that loop is this thread's; inside a running loop (Jupyter) it
    runs in a worker thread named ``name`` while the caller blocks, since a loop cannot be re-entered.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = asyncio.run(make())
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=name)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
