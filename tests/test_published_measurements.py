"""The published-measurements table: it loads, every name resolves in the catalogs, and it is big enough."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from toolkit._data import load_csv
from toolkit._model.resolve import resolve_backend, resolve_gpu, resolve_kv_dtype, resolve_model, resolve_quant

COLUMNS = [
    "id",
    "family",
    "metric",
    "value",
    "statistic",
    "model",
    "weights",
    "kv_dtype",
    "gpu",
    "tensor_parallel",
    "engine",
    "engine_version",
    "input_tokens",
    "output_tokens",
    "load_mode",
    "load_level",
    "requests",
    "source",
    "source_date",
    "notes",
    "split",
]


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return load_csv("published_measurements.csv")


def test_columns_and_ids(table):
    assert list(table.columns) == COLUMNS
    assert table["id"].is_unique
    assert table["id"].notna().all()


def test_size_and_coverage(table):
    assert len(table) >= 150
    assert table["engine"].nunique() >= 4
    assert table["gpu"].nunique() >= 6
    assert {"ttft", "itl", "throughput"} <= set(table["family"])


def test_every_name_resolves_in_the_catalog(table):
    # each resolver raises on an unknown or ambiguous name; the resolved name is the one written
    for column, resolve in (
        ("model", resolve_model),
        ("gpu", resolve_gpu),
        ("weights", resolve_quant),
        ("kv_dtype", resolve_kv_dtype),
        ("engine", resolve_backend),
    ):
        for name in table[column].unique():
            assert resolve(name)["name"] == name, (column, name)


def test_values_and_conditions_are_well_formed(table):
    assert pd.to_numeric(table["value"]).gt(0).all()
    assert set(table["family"]) <= {"ttft", "itl", "throughput", "kv_capacity"}
    assert set(table["load_mode"]) <= {"single", "closed", "open", "offline"}
    assert set(table["split"]) == {"dev", "holdout"}
    assert table["tensor_parallel"].ge(1).all()
    for column in ("input_tokens", "output_tokens"):
        given = table[column].dropna()
        assert given.gt(0).all() and (given == given.round()).all()
    # a rate or concurrency is given wherever the load is not offline
    assert table.loc[table["load_mode"].isin(["closed", "open"]), "load_level"].notna().all()
    assert table["source"].str.len().gt(10).all()
    given = table["requests"].dropna()
    assert given.gt(0).all() and (given == given.round()).all()
    # a '#' inside a field would start a comment for the reader and cut the row short
    assert table["notes"].notna().all() and table["split"].notna().all()
    assert table["source_date"].astype(str).str.fullmatch(r"\d{4}-\d{2}(-\d{2})?").all()


def test_split_is_roughly_half(table):
    holdout = (table["split"] == "holdout").mean()
    assert 0.4 < holdout < 0.6


def test_split_is_the_seeded_draw_in_file_order(table):
    # the header's rule: no row was placed in either half by hand, and appending rows moves none
    u = np.random.default_rng(17).random(len(table))
    assert list(table["split"]) == list(np.where(u < 0.5, "holdout", "dev"))


def test_requests_are_those_the_source_quotes(table):
    # TensorRT-LLM's online table is quoted as 'generated using version 0.14.0, with 500 requests'
    quoted = table["source"].str.extract(r"with (\d+) requests", expand=False).dropna().astype(float)
    assert len(quoted) >= 100
    assert (table.loc[quoted.index, "requests"] == quoted).all()
