"""A piecewise-linear fit of the step time against batch size, so the simulator can jump many steps at once."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable

import numpy as np

__all__: list[str] = []


class _Linear:
    """``f(x) = a_j + b_j x`` on integer pieces ``[start_j, start_{j+1})`` covering ``[0, high]``."""

    __slots__ = ("starts", "a", "b")

    def __init__(self, f: Callable[[np.ndarray], np.ndarray], high: int):
        pieces = []
        stack = [(0, max(int(high), 1))]
        while stack:
            lo, hi = stack.pop()
            xs = np.unique(np.concatenate([np.linspace(lo, hi, 9).round(), [lo + 1, hi - 1]]).clip(lo, hi))
            ys = np.asarray(f(xs), dtype=float)
            slope = (ys[-1] - ys[0]) / (hi - lo) if hi > lo else 0.0
            chord = ys[0] + slope * (xs - lo)
            if hi - lo <= 1 or np.allclose(ys, chord, rtol=1e-10, atol=0.0):
                pieces.append((lo, ys[0] - slope * lo, slope))
                continue
            # a kink: split where the end lines cross (exact for one kink), else in the middle
            left, right = ys[1] - ys[0], ys[-1] - ys[-2]
            cut = (lo + hi) // 2
            if left != right:
                cross = (ys[-1] - ys[0] - right * hi + left * lo) / (left - right)
                if lo <= cross < hi:
                    cut = int(math.floor(cross))
            stack += [(cut + 1, hi), (lo, cut)]
        pieces.sort()
        # plain ints and floats: numpy scalars would make every later sum a slow numpy call
        self.starts = [int(p[0]) for p in pieces]
        self.a = [float(p[1]) for p in pieces]
        self.b = [float(p[2]) for p in pieces]

    def __call__(self, x: int) -> float:
        j = bisect_right(self.starts, x) - 1
        return self.a[j] + self.b[j] * x

    def _pieces(self, x0: int, n: int, k: int) -> list[tuple[int, int, float, float]]:
        """(first step, steps, a, b) for the steps ``x0 + n i``, ``i < k``, piece by piece."""
        starts = self.starts
        j = bisect_right(starts, x0) - 1
        if j + 1 == len(starts) or x0 + n * (k - 1) < starts[j + 1]:  # the usual case: one piece
            return [(0, k, self.a[j], self.b[j])]
        out = []
        i = 0
        while i < k:
            end = k if j + 1 >= len(starts) or n == 0 else min(k, (starts[j + 1] - x0 + n - 1) // n)
            if end > i:
                out.append((i, end - i, self.a[j], self.b[j]))
                i = end
            j += 1
        return out

    def series(self, x0: int, n: int, k: int) -> float:
        """``sum(f(x0 + n i) for i in range(k))`` in closed form."""
        starts = self.starts
        j = bisect_right(starts, x0) - 1
        if j + 1 == len(starts) or x0 + n * (k - 1) < starts[j + 1]:  # the usual case: one piece
            b = self.b[j]
            return k * (self.a[j] + b * x0) + b * n * k * (k - 1) / 2
        total = 0.0
        for i, m, a, b in self._pieces(x0, n, k):
            total += m * (a + b * (x0 + n * i)) + b * n * m * (m - 1) / 2
        return total

    def steps_to_reach(self, x0: int, n: int, k: int, target: float) -> int:
        """Smallest ``m`` in [1, k] with ``series(x0, n, m) >= target`` (``k`` if none)."""
        done = 0.0
        for i, m, a, b in self._pieces(x0, n, k):
            first = a + b * (x0 + n * i)
            half = b * n / 2
            whole = m * first + b * n * m * (m - 1) / 2
            if done + whole < target:
                done += whole
                continue
            return max(i + _within(first, half, m, target - done), 1)
        return k

    def reach(self, x0: int, n: int, k: int, target: float) -> tuple[int, float]:
        """(``steps_to_reach(x0, n, k, target)``, ``series`` of that many steps), in one pass where
        the ``k`` steps lie on one piece (the usual case), with the same arithmetic as the two."""
        starts = self.starts
        j = bisect_right(starts, x0) - 1
        if j + 1 == len(starts) or x0 + n * (k - 1) < starts[j + 1]:
            a, b = self.a[j], self.b[j]
            first = a + b * x0
            m = k if k * first + b * n * k * (k - 1) / 2 < target else _within(first, b * n / 2, k, target)
            return m, m * first + b * n * m * (m - 1) / 2
        m = self.steps_to_reach(x0, n, k, target)
        return m, self.series(x0, n, m)


def _within(first: float, half: float, m: int, need: float) -> int:
    """Smallest ``s`` in [1, m] with ``s first + half s (s - 1) >= need``: steps of one piece, the
    first lasting ``first``, each next ``2 half`` longer, that reach ``need`` (``m`` if none)."""
    lin = first - half
    if half > 0:
        root = lin * lin + 4 * half * need
        guess = (-lin + math.sqrt(0.0 if root < 0.0 else root)) / (2 * half)
    else:
        guess = need / first if first > 0 else 1.0
    # clipped to [1, m] (comparisons: this runs once per decode run an arrival cuts short)
    s = math.ceil(guess)
    s = 1 if s < 1 else m if s > m else s
    while s > 1 and (s - 1) * first + half * (s - 1) * (s - 2) >= need:
        s -= 1
    while s < m and s * first + half * s * (s - 1) < need:
        s += 1
    return s
