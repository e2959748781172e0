"""Package data: the catalogs, efficiencies, presets, reference tables and recorded runs.

Every CSV here ships inside the wheel and is read with :mod:`importlib.resources`, so an installed
package finds its data wherever it lives. Every row carries a ``source``.
"""

from __future__ import annotations

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
    import pandas as pd

    path = data_file(name)
    if not path.is_file():
        raise FileNotFoundError(f"packaged data file {name!r} not found in toolkit._data")
    with path.open("rb") as handle:
        return pd.read_csv(handle, comment="#")


def load_csv(name: str) -> pd.DataFrame:
    """Return a fresh copy of the packaged CSV ``name`` so callers may modify it freely."""
    return _read(name).copy()
