"""The packaged tables read without pandas: every value as ``pandas.read_csv`` reads it."""

from __future__ import annotations

import math
from importlib import resources

import pytest

from toolkit._data import load_csv, load_rows

TABLES = sorted(p.name for p in resources.files("toolkit._data").iterdir() if p.name.endswith(".csv"))


@pytest.mark.parametrize("name", TABLES)
def test_rows_are_the_records_pandas_reads(name):
    expected = load_csv(name).to_dict("records")
    rows = load_rows(name)
    assert len(rows) == len(expected) > 0
    for row, record in zip(rows, expected):
        assert list(row) == list(record)
        for key, value in record.items():
            got = row[key]
            assert type(got) is type(value), (name, key, got, value)
            assert got == value or (isinstance(value, float) and math.isnan(value) and math.isnan(got)), (name, key)


def test_rows_are_fresh_copies():
    rows = load_rows("gpus.csv")
    rows[0]["name"] = "changed"
    assert load_rows("gpus.csv")[0]["name"] != "changed"
