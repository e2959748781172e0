"""Keyword-only parameters with a deprecation period for the positional spelling.

A wide public function declares everything after its first few parameters keyword-only
(``def simulate(model=None, gpu=None, quant=None, *, prompt_tokens=..., ...)``), so a call names what
it sets and no call needs placeholder ``None`` values. Calls written before that, which passed those
parameters by position, keep working for one release through :func:`positional_deprecated`: it maps
the extra positional values onto the keyword-only parameters in their declared order and warns with a
``DeprecationWarning`` that shows the keyword spelling.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

__all__: list[str] = []

F = TypeVar("F", bound=Callable[..., Any])


def positional_deprecated(func: F) -> F:
    """Wrap ``func`` so that values passed by position past its positional parameters still reach its
    keyword-only parameters (in their declared order), with a ``DeprecationWarning`` naming them.

    The wrapper keeps ``func``'s signature (``inspect.signature`` follows ``__wrapped__``) and, for a
    coroutine function, stays one."""
    params = inspect.signature(func).parameters.values()
    positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    keyword_only = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    name = func.__qualname__.removesuffix(".__init__")  # a class is called by its own name

    def keywords(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        if len(args) <= positional:
            return args, kwargs
        extra = args[positional:]
        if len(extra) > len(keyword_only):
            raise TypeError(
                f"{func.__name__}() takes at most {positional + len(keyword_only)} arguments, got {len(args)}"
            )
        moved = keyword_only[: len(extra)]
        for argument in moved:
            if argument in kwargs:
                raise TypeError(f"{name}() got multiple values for argument {argument!r}")
        spelled = ", ".join(f"{argument}=..." for argument in moved)
        warnings.warn(
            f"{name}(): passing {', '.join(moved)} by position is deprecated and stops working in the "
            f"next release; write {name}(..., {spelled})",
            DeprecationWarning,
            stacklevel=3,
        )
        return args[:positional], {**kwargs, **dict(zip(moved, extra))}

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def coroutine_wrapper(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = keywords(args, kwargs)
            return await func(*args, **kwargs)

        return coroutine_wrapper  # type: ignore[return-value]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = keywords(args, kwargs)
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
