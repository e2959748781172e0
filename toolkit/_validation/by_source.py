"""Accuracy against published measurements by source: per publisher, per engine, and left one source out.

Every default of ``data/efficiency.csv`` and every engine term of ``data/engine_efficiency.csv``
records in ``chosen_on`` the publishers whose rows were looked at when its value was chosen. A row
of ``data/published_measurements.csv`` uses every default and the terms of its engine (its release's
too); it is *informed* when one of them was chosen on its own publisher's rows. The
leave-one-source-out figure keeps only the rows that are not informed: each publisher's rows
predicted with nothing chosen on them. Nothing is fitted per row (the defaults are fixed), so this
is bookkeeping, not refitting: a publisher whose every row is informed has no held-out figure.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from toolkit._data import load_csv
from toolkit._stats import quantile_ci95

__all__ = ["accuracy_by_source", "publisher_of", "source_provenance", "term_provenance"]

_GITHUB = re.compile(r"https?://github\.com/([^/\s]+)/([^/\s#?]+)")
_URL = re.compile(r"https?://([^/\s]+)/?([^/\s#?]*)")
# the same project under its former owner's name
_RENAMED = {"ggerganov/llama.cpp": "ggml-org/llama.cpp"}


def publisher_of(source: str) -> str:
    """The publisher of a measurement's ``source``: ``owner/repository`` for a GitHub address, else
    the host and the first path segment (``docs.nvidia.com/nim``), else the citation as written.

    Parameters
    ----------
    source : str
        A ``source`` field of ``data/published_measurements.csv``.

    Returns
    -------
    str
        The publisher's name.

    Raises
    ------
    ValueError
        If ``source`` is not a non-empty string.
    """
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"source must be a non-empty string, got {source!r}")
    github = _GITHUB.search(source)
    if github:
        name = f"{github.group(1)}/{github.group(2)}"
        return _RENAMED.get(name, name)
    url = _URL.search(source)
    if url:
        return f"{url.group(1)}/{url.group(2)}".rstrip("/")
    return source.strip()


def term_provenance() -> pd.DataFrame:
    """Every default and engine term with the publishers it was chosen on.

    Returns
    -------
    pandas.DataFrame
        One row per term: ``engine`` (None for a default of ``data/efficiency.csv``), ``versions``
        (None for every release), ``parameter``, ``value`` and ``chosen_on`` (a tuple of publishers,
        empty where the value was taken without looking at a published row).
    """
    defaults = load_csv("efficiency.csv").assign(engine=None, versions=None)
    engines = load_csv("engine_efficiency.csv")
    table = pd.concat([defaults, engines], ignore_index=True)[["engine", "versions", "parameter", "value", "chosen_on"]]
    for column in ("engine", "versions"):
        table[column] = pd.Series([None if pd.isna(v) else str(v) for v in table[column]], dtype=object)
    table["chosen_on"] = [() if c == "none" else tuple(str(c).split(";")) for c in table["chosen_on"]]
    return table


def _informing(engine: str, version: object, terms: pd.DataFrame) -> tuple[str, ...]:
    """The publishers that chose any term a row of ``engine`` at ``version`` uses, sorted."""
    release = None if version is None or pd.isna(version) else str(version)
    return tuple(
        sorted(
            {
                publisher
                for term_engine, versions, chosen in zip(terms["engine"], terms["versions"], terms["chosen_on"])
                if term_engine is None
                or (
                    term_engine == engine
                    and (versions is None or (release is not None and release in versions.split(";")))
                )
                for publisher in chosen
            }
        )
    )


def _table(measurements: pd.DataFrame | str | Path | None) -> pd.DataFrame:
    """The measurements as given: the packaged table by default, a CSV path read, a frame as it is."""
    if measurements is None:
        return load_csv("published_measurements.csv")
    if isinstance(measurements, (str, Path)):
        return pd.read_csv(measurements, comment="#")
    return measurements


def source_provenance(measurements: pd.DataFrame | str | Path | None = None) -> pd.DataFrame:
    """Each measurement's publisher and the publishers that chose the terms its prediction uses.

    Parameters
    ----------
    measurements : pandas.DataFrame, str or Path, optional
        Rows with ``id``, ``source``, ``engine`` and ``engine_version``; default
        ``data/published_measurements.csv``.

    Returns
    -------
    pandas.DataFrame
        One row per measurement: ``id``, ``publisher``, ``informing`` (a sorted tuple of the
        publishers whose rows chose a default or an engine term the row uses) and ``informed``
        (its own publisher is among them, so the row is not held out).

    Raises
    ------
    ValueError
        If a required column is missing.
    """
    table = _table(measurements)
    missing = [c for c in ("id", "source", "engine", "engine_version") if c not in table.columns]
    if missing:
        raise ValueError(f"measurements lack the columns {missing}")
    terms = term_provenance()
    informing = [_informing(e, v, terms) for e, v in zip(table["engine"], table["engine_version"])]
    publishers = [publisher_of(s) for s in table["source"]]
    return pd.DataFrame(
        {
            "id": list(table["id"]),
            "publisher": publishers,
            "informing": informing,
            "informed": [p in chosen for p, chosen in zip(publishers, informing)],
        }
    )


def _quantiles(errors: pd.Series) -> dict[str, float]:
    """Median and p90 of ``|error|`` with their 95% order-statistic intervals (NaN for no rows)."""
    if errors.empty:
        return dict.fromkeys(
            (
                "median_abs_err",
                "median_abs_err_low",
                "median_abs_err_high",
                "p90_abs_err",
                "p90_abs_err_low",
                "p90_abs_err_high",
            ),
            math.nan,
        )
    median, p90 = quantile_ci95(errors, 0.5), quantile_ci95(errors, 0.9)
    return {
        "median_abs_err": float(errors.median()),
        "median_abs_err_low": median[0],
        "median_abs_err_high": median[1],
        "p90_abs_err": float(errors.quantile(0.9)),
        "p90_abs_err_low": p90[0],
        "p90_abs_err_high": p90[1],
    }


def accuracy_by_source(
    accuracy: pd.DataFrame,
    measurements: pd.DataFrame | str | Path | None = None,
) -> pd.DataFrame:
    """Median and p90 ``|error|`` with 95% intervals per family, by publisher, engine, split, and
    left one source out.

    Rows without a prediction or below the physical floor are left out, as in
    :func:`accuracy_summary`.

    Parameters
    ----------
    accuracy : pandas.DataFrame
        :func:`accuracy_against_published` output (its ``engine`` and ``engine_version`` choose the
        terms each row uses, as :func:`source_provenance` reads them).
    measurements : pandas.DataFrame, str or Path, optional
        The table ``accuracy`` was computed from (its ``id`` and ``source`` columns); default
        ``data/published_measurements.csv``.

    Returns
    -------
    pandas.DataFrame
        One row per ``view`` and ``group`` and ``family`` (``all`` for every family together):
        ``view`` is ``publisher``, ``engine`` or ``split`` (every row of that group), or
        ``held_out_publisher`` (a publisher's rows that no term they use was chosen on) and
        ``leave_one_source_out`` (group ``all``: every such row); then ``rows`` (kept),
        ``informed`` (rows of the group a term they use was chosen on their own publisher),
        ``median_abs_err``, ``p90_abs_err`` and their ``_low`` / ``_high`` 95% intervals.

    Raises
    ------
    ValueError
        If an ``id`` of ``accuracy`` is not in ``measurements``.
    """
    table = _table(measurements)
    sources = dict(zip(table["id"], table["source"]))
    missing = sorted(set(accuracy["id"]) - set(sources))
    if missing:
        raise ValueError(f"accuracy ids not in measurements: {missing[:5]}")
    rows = accuracy[["id", "engine", "engine_version"]].assign(source=[sources[i] for i in accuracy["id"]])
    provenance = source_provenance(rows)
    rows = accuracy.assign(publisher=provenance["publisher"].to_numpy(), informed=provenance["informed"].to_numpy())
    kept = rows["predicted"].notna() & ~rows["below_floor"].astype(bool)
    held = rows[~rows["informed"]]
    views = [
        ("publisher", rows, "publisher"),
        ("engine", rows, "engine"),
        ("split", rows, "split"),
        ("held_out_publisher", held, "publisher"),
        ("leave_one_source_out", held.assign(all="all"), "all"),
    ]
    records = []
    for view, frame, key in views:
        for group, part in frame.groupby(key, sort=True):
            for family in ["all", *sorted(part["family"].unique())]:
                fam = part if family == "all" else part[part["family"] == family]
                errors = fam.loc[kept.loc[fam.index], "abs_err"]
                informed = int(fam["informed"].sum())
                records.append(
                    {
                        "view": view,
                        "group": group,
                        "family": family,
                        "rows": len(errors),
                        "informed": informed,
                        **_quantiles(errors),
                    }
                )
    return pd.DataFrame(records)
