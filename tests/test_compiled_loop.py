"""The event loop's compiled build (setup.py, mypyc) matches the .py files it was built from."""

import hashlib
import importlib
import importlib.machinery
import json

from toolkit._queueing import build_check

MODULES = tuple(name.removesuffix(".py") for name in build_check.COMPILED)


def _compiled(name: str) -> bool:
    origin = importlib.import_module(f"toolkit._queueing.{name}").__file__
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def test_compiled_modules_are_built_from_the_current_sources():
    assert build_check.stale_compiled() == [], "rebuild with `pip install -e .`"


def test_the_list_names_the_event_loop_and_existing_modules():
    assert "event_loop.py" in build_check.COMPILED
    assert all((build_check._HERE / name).is_file() for name in build_check.COMPILED)


def test_a_build_record_exists_exactly_when_the_modules_are_compiled():
    compiled = {name: _compiled(name) for name in MODULES}
    assert len(set(compiled.values())) == 1, compiled  # all compiled, or all pure Python
    assert build_check.RECORD.exists() == compiled["event_loop"]


def test_an_edited_source_is_reported_stale(tmp_path, monkeypatch):
    source = (build_check._HERE / "event_loop.py").read_bytes()
    record = tmp_path / "record.json"
    record.write_text(
        json.dumps(
            {"event_loop.py": hashlib.sha256(source).hexdigest(), "piecewise.py": hashlib.sha256(b"x").hexdigest()}
        )
    )
    monkeypatch.setattr(build_check, "RECORD", record)
    assert build_check.stale_compiled() == ["piecewise.py"]
