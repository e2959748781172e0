"""Access to the catalogs under ``data/`` (every row carries a ``source``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pandas as pd

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


@lru_cache(maxsize=None)
def _read(name: str) -> pd.DataFrame:
    path = DATA_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"catalog {name!r} not found under {DATA_DIR}")
    return pd.read_csv(path, comment="#")


def load_csv(name: str) -> pd.DataFrame:
    """Return a fresh copy of ``data/<name>`` so callers may modify it freely."""
    return _read(name).copy()
