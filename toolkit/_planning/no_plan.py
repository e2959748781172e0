"""Why a plan came out empty: the first of the question's conditions that no configuration asked for
can meet, in the order the planner applies them."""

from __future__ import annotations

from toolkit._model.resolve import within_window
from toolkit._planning.grid import _thaw
from toolkit._planning.inputs import _support

__all__: list[str] = []


def no_plan_reason(
    specs: tuple[tuple, tuple, tuple, tuple],
    tensor_parallel: tuple[int, ...],
    context_tokens: int,
    candidates: int,
    max_replicas: int,
    arrival_rate: float,
) -> str:
    """The reason no plan answers the question, as one sentence.

    Parameters
    ----------
    specs : tuple
        The frozen model, GPU, format and backend specs asked for (:func:`toolkit._planning.grid._freeze`).
    tensor_parallel : tuple of int
        The degrees asked for.
    context_tokens : int
        Prompt plus output tokens of one request.
    candidates : int
        (configuration, batch) candidates the grid kept; 0 when no configuration holds one request.
    max_replicas, arrival_rate : int, float
        The fleet ceiling and the load, for a grid whose every candidate needs more replicas.
    """
    if candidates:
        replicas = f"{max_replicas} replica{'s' * (max_replicas != 1)}"
        return (
            f"no fleet of at most {replicas} of any configuration asked for serves {arrival_rate:g} "
            "requests/s: raise max_replicas, or allow larger GPUs or tensor parallel degrees"
        )
    models, _, quants, backends = ([_thaw(s) for s in kind] for kind in specs)
    windows = {m["name"]: m["max_context"] for m in models}
    if not any(within_window(w, context_tokens) for w in windows.values()):
        name = max(windows, key=windows.get)
        return (
            f"a request of {context_tokens:,} tokens (prompt_tokens + output_tokens) exceeds the context "
            f"window of every model asked for (the largest: {name}, {windows[name]:,.0f} tokens)"
        )
    support = _support()
    loaded = {q["name"] for q in quants} & {f for b in backends for f in support.get(b["name"], (frozenset(),))[0]}
    if not loaded:
        names = ", ".join(sorted(b["name"] for b in backends))
        return f"no backend asked for ({names}) loads a weight format asked for"
    degrees = ", ".join(map(str, tensor_parallel))
    return (
        f"no configuration asked for holds the weights and one {context_tokens:,}-token request: too "
        f"little GPU memory at tensor parallel {degrees}, or a degree that does not split a model's "
        "attention and KV heads evenly or that its backends cannot shard"
    )
