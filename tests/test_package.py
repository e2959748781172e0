"""The package's public surface and its install files."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path

import pytest

import toolkit

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", toolkit.__all__)
def test_every_public_name_exists_and_is_documented(name):
    obj = getattr(toolkit, name)
    doc = inspect.getdoc(obj)
    assert doc and len(doc.split()) >= 5, f"toolkit.{name} has no real docstring"
    # numpydoc: a function with parameters documents them
    if inspect.isfunction(obj) and inspect.signature(obj).parameters:
        assert "Parameters" in doc, f"toolkit.{name} does not document its parameters"


def test_all_is_sorted_and_unique():
    assert list(toolkit.__all__) == sorted(set(toolkit.__all__))


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError):
        toolkit.no_such_function  # noqa: B018


def _norm(requirement: str) -> str:
    name = re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0]
    return name.lower().replace("_", "-")


def test_pyproject_and_environment_name_the_same_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_norm(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {_norm(r) for r in extra}
    conda, pip = set(), set()
    in_pip = in_deps = False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        stripped = line.strip()
        if not line.startswith(" ") and stripped.endswith(":"):
            in_deps = stripped == "dependencies:"
            continue
        if not in_deps:
            continue
        if stripped.startswith("- pip:"):
            in_pip = True
            continue
        if not stripped.startswith("- "):
            continue
        item = stripped[2:].strip()
        indent = len(line) - len(line.lstrip())
        if in_pip and indent > 4:
            if not item.startswith("-e"):
                pip.add(_norm(item))
        else:
            in_pip = False
            conda.add(_norm(item))
    conda -= {"python", "pip"}
    assert wanted == conda | pip


def test_every_catalog_row_has_a_source():
    # traces/ holds third-party files kept byte for byte; their source is the README beside them
    for path in sorted((ROOT / "toolkit" / "_data").glob("*.csv")):
        import pandas as pd

        df = pd.read_csv(path, comment="#")
        assert "source" in df.columns, f"{path.name} has no source column"
        assert df["source"].notna().all() and (df["source"].astype(str).str.len() > 3).all(), path.name
