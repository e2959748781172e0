"""Argument checks shared by every public function.

Each check raises ``ValueError`` whose message names the argument and the allowed range, so a user
sees at once which input was wrong.
"""

from __future__ import annotations

import math
import numbers
import sys

import numpy as np

__all__: list[str] = []


def is_pandas(value: object, *kinds: str) -> bool:
    """Whether ``value`` is one of the pandas types named (``"DataFrame"``, ``"Series"``), without
    importing pandas: nothing is a pandas object before pandas is loaded."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(value, tuple(getattr(pd, kind) for kind in kinds))


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _shown(value: object) -> object:
    """``value`` as a message shows it: a numpy scalar as the plain number it holds."""
    return value.item() if isinstance(value, np.generic) else value


def check_number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> float:
    """Return ``value`` as a finite float, or raise ``ValueError`` naming ``name`` and the range."""
    rng = _describe(low, high, low_inclusive, high_inclusive)
    if not _is_number(value) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number {rng}, got {_shown(value)!r}")
    x = float(value)
    if low is not None and (x < low or (x == low and not low_inclusive)):
        raise ValueError(f"{name} must be {rng}, got {_shown(value)!r}")
    if high is not None and (x > high or (x == high and not high_inclusive)):
        raise ValueError(f"{name} must be {rng}, got {_shown(value)!r}")
    return x


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int, or raise ``ValueError`` naming ``name`` and the range."""
    rng = _describe(low, high, True, True)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if _is_number(value) and math.isfinite(float(value)) and float(value).is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer {rng}, got {_shown(value)!r}")
    x = int(value)
    if (low is not None and x < low) or (high is not None and x > high):
        raise ValueError(f"{name} must be an integer {rng}, got {_shown(value)!r}")
    return x


def check_array(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> np.ndarray:
    """Return ``value`` as a float array (at least 1-D), every element finite and in range."""
    rng = _describe(low, high, low_inclusive, high_inclusive)
    try:
        arr = np.atleast_1d(np.asarray(value, dtype=float))
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers {rng}, got {value!r}") from None
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    finite = np.isfinite(arr)
    if not finite.all():
        raise ValueError(f"{name} must be finite numbers {rng}, got {arr[~finite][0].item()!r}")
    bad = np.zeros(arr.shape, dtype=bool)
    if low is not None:
        bad |= arr < low if low_inclusive else arr <= low
    if high is not None:
        bad |= arr > high if high_inclusive else arr >= high
    if bad.any():
        raise ValueError(f"{name} must be {rng}, got {arr[bad][0].item()!r}")
    return arr


def check_choice(name: str, value: object, choices: list[str] | tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ``ValueError`` listing them."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _describe(low, high, low_inclusive, high_inclusive) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>=' if low_inclusive else '>'} {low:g}")
    if high is not None:
        parts.append(f"{'<=' if high_inclusive else '<'} {high:g}")
    return "(" + " and ".join(parts) + ")" if parts else "(any finite value)"
