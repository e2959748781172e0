"""What a sweep leaves on disk, written so that a crash loses nothing that finished.

``out_dir`` holds:

- ``lanes.jsonl``: one JSON object per lane attempt, appended the moment the attempt ends. Each line
  goes to the kernel in a single ``os.write`` on an ``O_APPEND`` descriptor and is then fsync'ed, so
  a process killed with SIGKILL leaves every finished attempt and never half a line. A torn last line
  (a power cut mid-write) is skipped on reading and the next append starts on a fresh line.
- ``levels.csv`` (one row per level) and ``runs.csv`` (one row per level and repeat), replaced
  atomically (write a temporary file, then ``os.replace``) after every level.
- ``run.json``: the sweep's parameters, its tagging nonce and how it ended. Never the API key.

Every string that reaches a file first passes :func:`redact`, which blanks the secrets the sweep was
given (the API key, a password in the URL), in case a server echoed them back in an error body. An
error body is read only up to a bound, so a key it echoes can be cut anywhere: :func:`redact` blanks
every run of ``MIN_FRAGMENT`` or more characters that also occurs inside a secret, not only the whole
secret, and what it leaves can be cut again without bringing a piece of a secret back.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import httpx
import pandas as pd

__all__: list[str] = []

LANES_FILE = "lanes.jsonl"
LEVELS_FILE = "levels.csv"
RUNS_FILE = "runs.csv"
RUN_FILE = "run.json"
REDACTED = "***"
_URL_PASSWORD = re.compile(r"(?<=://)([^/@:\s]+):([^/@\s]+)@")


def redact(value: Any, secrets: Iterable[str]) -> Any:
    """Return ``value`` with every secret, every piece of one, and any ``user:password@`` in a URL
    replaced by ``***``.

    A piece is a run of at least ``MIN_FRAGMENT`` characters that occurs in a secret: a body cut in
    the middle of a key leaves a prefix of it at the cut, and a suffix where the cut was before it.
    A secret shorter than ``MIN_FRAGMENT`` is matched whole. Strings are scrubbed; dicts and lists
    are scrubbed recursively; other values pass unchanged.
    """
    if isinstance(value, str):
        for secret in secrets:
            if secret:
                value = _blank_pieces(value, secret)
        return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", value)
    if isinstance(value, dict):
        return {k: redact(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    return value


# the shortest piece of a secret that is blanked: a run this long rarely occurs by chance in an error
# text, and what a leak of five characters of a 32-character or longer key tells is little
MIN_FRAGMENT = 6


@lru_cache(maxsize=32)
def _pieces(secret: str) -> re.Pattern[str]:
    # a lookahead matches at every position, so overlapping pieces are all found
    grams = sorted({secret[i : i + MIN_FRAGMENT] for i in range(len(secret) - MIN_FRAGMENT + 1)})
    return re.compile("(?=(" + "|".join(map(re.escape, grams)) + "))")


def _blank_pieces(text: str, secret: str) -> str:
    if len(secret) < MIN_FRAGMENT:
        return text.replace(secret, REDACTED)
    spans: list[list[int]] = []
    for match in _pieces(secret).finditer(text):
        start, end = match.start(), match.start() + MIN_FRAGMENT
        if spans and start <= spans[-1][1]:
            spans[-1][1] = end
        else:
            spans.append([start, end])
    if not spans:
        return text
    out, last = [], 0
    for start, end in spans:
        out += [text[last:start], REDACTED]
        last = end
    return "".join([*out, text[last:]])


# The only fields of a record, a table or run.json that can carry a credential: text that came from
# a server or an exception, and URLs. Everything else (model names, prompts' hashes, numbers) is
# written as it is, so that a key that happens to be a common word cannot rewrite the data.
TEXT_FIELDS = frozenset({"error", "reason", "base_url", "metrics_url", "url"})


def scrub(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` with :func:`redact` applied to the ``TEXT_FIELDS`` of every mapping in it."""
    if isinstance(value, dict):
        return {k: redact(v, secrets) if k in TEXT_FIELDS else scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v, secrets) for v in value]
    return value


def split_credentials(url: str) -> tuple[str, httpx.BasicAuth | None, tuple[str, ...]]:
    """``url`` without ``user:password@``, that pair as basic auth, and the password as a secret.

    Credentials never travel inside a URL past this point, because URLs end up in log lines (httpx
    logs every request URL) and in error messages.
    """
    parsed = httpx.URL(url)
    if not parsed.userinfo:
        return url, None, ()
    clean = str(parsed.copy_with(username=None, password=None))
    password = parsed.password or ""
    return clean, httpx.BasicAuth(parsed.username, password), (password,) if password else ()


def _jsonable(value: Any) -> Any:
    # JSON has no NaN: an unknown number is written as null and read back as NaN by pandas.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _jsonable(value.item())
    return value


class LaneLog:
    """Append-only, crash-safe ``lanes.jsonl`` (or a no-op when ``out_dir`` is None)."""

    def __init__(self, out_dir: Path | None, secrets: tuple[str, ...]) -> None:
        self.path = None if out_dir is None else Path(out_dir) / LANES_FILE
        self._secrets = secrets

    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one whole line, then flush it to disk."""
        if self.path is None:
            return
        line = json.dumps(_jsonable(scrub(record, self._secrets)), allow_nan=False) + "\n"
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if _ends_torn(fd):
                line = "\n" + line
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        """Every complete record in the file (a torn line is skipped)."""
        if self.path is None or not self.path.exists():
            return []
        records = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                records.append(obj)
        return records


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def write_frame(frame: pd.DataFrame, path: Path, secrets: tuple[str, ...]) -> None:
    """Replace ``path`` with ``frame`` as CSV, atomically."""
    frame = frame.copy()
    for col in TEXT_FIELDS.intersection(frame.columns):
        frame[col] = frame[col].map(lambda v: redact(v, secrets))
    tmp = path.with_name(path.name + ".tmp")
    frame.to_csv(tmp, index=False)
    os.replace(tmp, path)


def write_json(obj: dict[str, Any], path: Path, secrets: tuple[str, ...]) -> None:
    """Replace ``path`` with ``obj`` as indented JSON, atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_jsonable(scrub(obj, secrets)), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The object in ``path``, or None when the file is missing or unreadable."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def read_frame(path: Path) -> pd.DataFrame | None:
    """The CSV in ``path``, or None when it is missing or unreadable."""
    try:
        return pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
