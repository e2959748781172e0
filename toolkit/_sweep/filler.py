"""Prompts of a given token length for replaying a trace, built from filler words.

A trace gives each request's prompt length in tokens, not its text. The replay sends a chat message
of random filler words sized so that the server's ``usage.prompt_tokens`` equals that length:

1. When the server has a ``/tokenize`` endpoint (llama.cpp, vLLM, SGLang), the vocabulary is cut to
   the words that are one token each with a leading space, so ``k`` words are ``k`` tokens.
   Otherwise every word is kept and lengths come out approximate.
2. Two calibration requests (``max_tokens=1``, not part of the replay) of ``k1`` and ``k2`` words
   give ``usage.prompt_tokens`` ``p1`` and ``p2``: tokens per word ``b = (p2 - p1) / (k2 - k1)`` and
   the chat template's own tokens ``a = p1 - b * k1``. A prompt of ``n`` tokens gets
   ``round((n - a) / b)`` words (at least one), so a target below ``a + b`` cannot be met.

A server whose counts make no sense is refused rather than believed: ``b`` must lie between
``MIN_TOKENS_PER_WORD`` and ``MAX_TOKENS_PER_WORD`` (a common English word is one or two tokens on any
subword tokenizer, about five on a byte-level one), so a prompt is never more than
``1 / MIN_TOKENS_PER_WORD`` times its target in words (plus the calibration's 16), however the server
lies.

Each request draws its words from its own seeded generator, so no two prompts share a prefix beyond
the chat template (a production trace carries no information about shared prefixes).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from toolkit._sweep.bounded import MAX_EXCERPT_BYTES, BodyTooLarge, fetch

__all__: list[str] = []


# Common English words; those that are not a single token on the server's tokenizer are dropped.
WORDS = (  # noqa: SIM905 - a paragraph of words reads better than 200 quoted ones
    "the of and to in is was for on are with as at be by this from had not but what all were when we "
    "there can an your which their said if do will each about how up out them then she many some so "
    "these would other into has more her two like him see time could no make than first been its who "
    "now people my made over did down only way find use may water long little very after words called "
    "just where most know get through back much before go good new write our used me man too any day "
    "same right look think also around another came come work three word must because does part even "
    "place well such here take why things help put years different away again off went old number great "
    "tell men say small every found still between name should home big give air line set own under read "
    "last never us left end along while might next sound below saw something thought both few those "
    "always looked show large often together asked house world going want school important until form"
).split()

_CALIBRATION_WORDS = (16, 256)
MIN_TOKENS_PER_WORD = 0.25
MAX_TOKENS_PER_WORD = 8.0
# the /tokenize probes are answered at once by a server that has the endpoint: a longer wait is no answer
_TOKENIZE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Filler:
    """How prompts are sized on one server: the vocabulary and the fitted tokens-per-word line."""

    words: tuple[str, ...]
    template_tokens: float
    tokens_per_word: float
    method: str  # "tokenize" or "calibrated"

    def words_for(self, prompt_tokens: int) -> int:
        """Words that make a prompt of ``prompt_tokens`` tokens (at least one)."""
        return max(1, round((prompt_tokens - self.template_tokens) / self.tokens_per_word))

    def text(self, n_words: int, seed: int) -> str:
        """``n_words`` filler words drawn by a generator seeded with ``seed``.

        The first word is always the vocabulary's first: a word's token count can differ at the
        start of a message (no leading space), and a fixed opening keeps that in the intercept.
        """
        rng = np.random.default_rng(seed)
        drawn = np.asarray(self.words)[rng.integers(0, len(self.words), n_words - 1)]
        return " ".join((self.words[0], *drawn))


async def build_filler(
    client: httpx.AsyncClient,
    root: str,
    chat_url: str,
    model: str,
    *,
    auth: httpx.Auth | None,
    timeout_s: float,
    seed: int,
) -> Filler:
    """Probe ``/tokenize`` and calibrate the words-to-tokens line with two short requests."""
    auth = auth or httpx.USE_CLIENT_DEFAULT
    single = await _single_token_words(client, root, model, auth, timeout_s)
    words = tuple(single) if len(single) >= 32 else tuple(WORDS)
    draft = Filler(words, 0.0, 1.0, "tokenize" if words == tuple(single) else "calibrated")
    counts = []
    for i, k in enumerate(_CALIBRATION_WORDS):
        body = {
            "model": model,
            "messages": [{"role": "user", "content": draft.text(k, seed=seed + 2**62 + i)}],
            "max_tokens": 1,
            "stream": False,
        }
        try:
            status, raw = await fetch(
                client, "POST", chat_url, max_bytes=MAX_EXCERPT_BYTES * 16, timeout_s=timeout_s, json=body, auth=auth
            )
        except (httpx.HTTPError, TimeoutError, BodyTooLarge) as exc:
            raise ConnectionError(f"calibrating prompt lengths: {chat_url} failed ({type(exc).__name__})") from None
        usage = _usage(status, raw)
        if usage is None:
            raise ConnectionError(
                f"calibrating prompt lengths: {chat_url} answered HTTP {status} without "
                "usage.prompt_tokens, so prompt lengths cannot be sized"
            )
        counts.append(usage)
    (k1, k2), (p1, p2) = _CALIBRATION_WORDS, counts
    per_word = (p2 - p1) / (k2 - k1)
    if not MIN_TOKENS_PER_WORD <= per_word <= MAX_TOKENS_PER_WORD:
        raise ConnectionError(
            f"calibrating prompt lengths: usage.prompt_tokens was {p1} for {k1} words and {p2} for {k2}, "
            f"{per_word:.3g} tokens per word; a count from {MIN_TOKENS_PER_WORD:g} to {MAX_TOKENS_PER_WORD:g} "
            "is believed, so the server's counts cannot size prompts"
        )
    return Filler(words, p1 - per_word * k1, per_word, draft.method)


def _usage(status: int, raw: bytes) -> int | None:
    try:
        value = json.loads(raw)["usage"]["prompt_tokens"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10**9
    return value if status == 200 and ok else None


async def _single_token_words(
    client: httpx.AsyncClient, root: str, model: str, auth: Any, timeout_s: float
) -> list[str]:
    """The words of ``WORDS`` that ``/tokenize`` counts as one token after a space; [] without it."""

    async def count(text: str) -> int | None:
        body = {"content": text, "prompt": text, "model": model, "add_special": False, "add_special_tokens": False}
        try:
            status, raw = await fetch(
                client,
                "POST",
                root + "/tokenize",
                max_bytes=MAX_EXCERPT_BYTES,
                timeout_s=min(timeout_s, _TOKENIZE_TIMEOUT_S),
                json=body,
                auth=auth,
            )
            payload: Any = json.loads(raw)
        except (httpx.HTTPError, TimeoutError, BodyTooLarge, ValueError, RecursionError):
            return None
        tokens = payload.get("tokens") if isinstance(payload, dict) and status == 200 else None
        return len(tokens) if isinstance(tokens, list) else None

    # one probe first: a server without /tokenize is not asked two hundred times
    first = await count(" " + WORDS[0])
    if first is None:
        return []
    counts = [first, *await asyncio.gather(*(count(" " + word) for word in WORDS[1:]))]
    if any(c is None for c in counts):
        return []
    return [word for word, c in zip(WORDS, counts, strict=True) if c == 1]
