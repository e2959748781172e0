"""A standard lane set for local sweeps: one shared preamble, a different strategy hint last per lane.

It mirrors the workload the sweep was designed for (the batched-evolution benchmark in the seeds):
every lane asks for the same small program, the long shared instructions come first and the per-lane
strategy hint comes last, so lanes share the longest possible prefix.
"""

from __future__ import annotations

from toolkit._args import check_int

__all__: list[str] = []

SYSTEM_PROMPT = """You are a careful Python programmer. Write one function, `count_primes_below(n: int) -> int`,
that returns how many prime numbers are strictly less than n. Rules:
- Standard library only; no imports beyond `math` and `itertools`.
- Return 0 for n <= 2. Handle n up to 10**7 in well under a second on one core.
- No printing, no input, no global state; the function must be pure and deterministic.
- Put a one-line docstring first, then the code. Keep comments short and only where needed.
- Prefer clear names over clever tricks, but do not trade correctness for clarity.
- Answer with a single fenced code block and nothing else.
The function will be compiled, tested against a reference on 200 random inputs, then timed."""

_HINTS = (
    "Use trial division by odd numbers up to the square root.",
    "Use the sieve of Eratosthenes on a bytearray.",
    "Use a sieve that stores odd numbers only.",
    "Use a segmented sieve with segments of 32768 numbers.",
    "Use wheel factorization with the wheel 2*3*5.",
    "Use the sieve of Sundaram.",
    "Use the sieve of Atkin.",
    "Use a bit-packed sieve in an int used as a bit set.",
    "Use trial division by the primes found so far.",
    "Use a sieve with slice assignment to clear multiples.",
    "Use Legendre's formula for the prime-counting function.",
    "Use the Meissel-Lehmer method.",
    "Use a generator of primes and count them.",
    "Use a dictionary-based incremental sieve.",
    "Use a sieve that skips multiples of 2 and 3.",
    "Use memoryview over a bytearray for the sieve.",
    "Use 6k +/- 1 trial division.",
    "Use the Miller-Rabin test for each odd candidate.",
    "Use a linear sieve that marks each composite once.",
    "Use a sieve over numbers of the form 30k + r.",
    "Use a sieve with bytes.translate-free counting via count(1).",
    "Use itertools.compress over a sieve.",
    "Use a sieve where index i stands for 2*i + 1.",
    "Use a segmented sieve whose segment size is the square root of n.",
    "Use a sieve that starts crossing out at p*p in steps of 2*p.",
    "Use recursion-free Lucy Hedgehog's algorithm.",
    "Use a sieve stored in a list of booleans.",
    "Use a sieve stored in an array of unsigned bytes.",
    "Use trial division with a precomputed list of small primes.",
    "Use Fermat checks filtered by trial division.",
    "Use a sieve and sum() over it.",
    "Use a wheel of 2*3*5*7 with a bytearray.",
)


def lane_prompts(lanes: int = 8) -> tuple[str, list[str]]:
    """The shared system prompt and ``lanes`` per-lane user prompts (strategy hint last).

    Parameters
    ----------
    lanes : int
        Number of lanes, 1..32.

    Returns
    -------
    tuple of (str, list of str)
        ``(system_prompt, prompts)`` for ``run_sweep(..., prompts, system_prompt=system_prompt)``.
    """
    lanes = check_int("lanes", lanes, low=1, high=len(_HINTS))
    return SYSTEM_PROMPT, [f"Write count_primes_below now. Strategy: {hint}" for hint in _HINTS[:lanes]]
