"""Progress bars for calls that can run for seconds or more: a tqdm bar, or a silent stand-in.

``progress=None`` (every public function's default) shows a bar only when the call is long and
stderr is a terminal, so scripts, pipes, notebooks and CI logs stay clean; ``True`` always shows it,
``False`` never. tqdm is imported only when a bar is shown.
"""

from __future__ import annotations

import sys
from typing import Any

__all__: list[str] = []


class _Silent:
    """The bar when none is shown: counts like one, prints nothing."""

    def __init__(self, total: int):
        self.total = total
        self.n = 0

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units done."""
        self.n += n

    def close(self) -> None:
        """Nothing to close."""


def check_progress(progress: object) -> bool | None:
    """``progress`` as given, or a ValueError naming it when it is not True, False or None."""
    if progress is not None and not isinstance(progress, bool):
        raise ValueError(f"progress must be True, False or None, got {progress!r}")
    return progress


def progress_bar(progress: bool | None, *, long: bool, total: int, desc: str, unit: str) -> Any:
    """A bar of ``total`` units: tqdm when ``progress`` is True, or None and ``long`` with stderr a
    terminal; else a silent one with the same ``update``, ``close``, ``n`` and ``total``.

    Parameters
    ----------
    progress : bool or None
        Show the bar (True), never (False), or when ``long`` on a terminal (None); checked.
    long : bool
        Whether the call is expected to take more than a few seconds.
    total : int
        Units of work.
    desc, unit : str
        Label of the bar and of its units.

    Returns
    -------
    tqdm.tqdm or _Silent
        Call ``update(n)`` as units finish and ``close()`` at the end.
    """
    show = check_progress(progress)
    if show is None:
        show = long and sys.stderr.isatty()
    if not show:
        return _Silent(total)
    from tqdm.auto import tqdm  # loaded only when a bar is shown

    return tqdm(total=total, desc=desc, unit=unit, leave=False, mininterval=0.5)
