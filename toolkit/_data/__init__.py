"""Package data: the catalogs, efficiencies, presets, reference tables and recorded runs.

Every CSV here ships inside the wheel and is read with :mod:`importlib.resources`, so an installed
package finds its data wherever it lives. Every row carries a ``source``. :func:`load_csv` gives a
DataFrame; :func:`load_rows` the same table as plain rows without loading pandas, for the paths that
need none (a command-line plan prints its table in about the time pandas takes to import).
"""

from __future__ import annotations

import csv
import io
import math
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__: list[str] = []


def data_file(name: str):
    """Return a traversable handle of the packaged file ``name`` (``name`` may contain ``/``)."""
    return resources.files(__name__).joinpath(name)


def has_data(name: str) -> bool:
    """Whether the packaged file ``name`` exists."""
    return data_file(name).is_file()


@cache
def _read(name: str) -> pd.DataFrame:
    import pandas as pd  # a catalog read as rows (load_rows) needs no pandas

    path = data_file(name)
    if not path.is_file():
        raise FileNotFoundError(f"packaged data file {name!r} not found in toolkit._data")
    with path.open("rb") as handle:
        return pd.read_csv(handle, comment="#")


def load_csv(name: str) -> pd.DataFrame:
    """Return a fresh copy of the packaged CSV ``name`` so callers may modify it freely."""
    return _read(name).copy()


# the strings pandas.read_csv reads as missing by default
_MISSING = frozenset(
    ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A")
    + ("NA", "NULL", "NaN", "None", "n/a", "nan", "null")
)
_TRUE, _FALSE = frozenset(("True", "TRUE", "true")), frozenset(("False", "FALSE", "false"))


def _typed(values: list[str]) -> list[object]:
    """A column's cells as the Python values of ``pandas.read_csv``'s records: missing -> NaN;
    every other cell an integer -> int (float where some are missing); numbers -> float; every
    other cell true/false -> bool (objects where some are missing); else the strings."""
    present = [v for v in values if v not in _MISSING]
    missing = len(present) < len(values)
    for kind in (int, float):
        try:
            numbers = [kind(v) for v in present]
        except ValueError:
            continue
        convert = float if missing else kind
        it = iter(numbers)
        return [math.nan if v in _MISSING else convert(next(it)) for v in values]
    if present and all(v in _TRUE or v in _FALSE for v in present):
        return [math.nan if v in _MISSING else v in _TRUE for v in values]
    return [math.nan if v in _MISSING else v for v in values]


@cache
def _read_rows(name: str) -> tuple[tuple[str, ...], tuple[tuple[object, ...], ...]]:
    path = data_file(name)
    if not path.is_file():
        raise FileNotFoundError(f"packaged data file {name!r} not found in toolkit._data")
    text = "".join(line for line in path.read_text(encoding="utf-8").splitlines(True) if not line.startswith("#"))
    header, *cells = csv.reader(io.StringIO(text))
    columns = [_typed([row[i] if i < len(row) else "" for row in cells]) for i in range(len(header))]
    return tuple(header), tuple(zip(*columns))


def load_rows(name: str) -> list[dict[str, object]]:
    """The packaged CSV ``name`` as fresh row dicts, the values ``load_csv(name).to_dict("records")``
    gives (a test checks every packaged table), read without pandas."""
    header, rows = _read_rows(name)
    return [dict(zip(header, row)) for row in rows]
