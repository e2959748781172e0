"""The package's shape: one ``__all__`` per private module, the public API their union, package
data in the wheel, and one list of tunable efficiencies that every entry point honours."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import toolkit

ROOT = Path(__file__).resolve().parent.parent


def _private_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(toolkit.__path__, prefix="toolkit."):
        # (``*__mypyc``: the shared library of the compiled event loop's build, no source of its own)
        if (
            info.name.split(".")[1].startswith("_")
            and info.name != "toolkit.__main__"
            and not info.name.endswith("__mypyc")
        ):
            names.append(info.name)
    return names


def test_every_private_module_declares_all_and_their_union_is_the_public_api():
    union: dict[str, str] = {}
    for name in _private_modules():
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), f"{name} has no __all__"
        for public in module.__all__:
            assert public not in union, f"{public} is exported by both {union[public]} and {name}"
            union[public] = name
            assert getattr(toolkit, public) is getattr(module, public)
    assert sorted(union) == sorted(toolkit.__all__)


def test_top_level_lists_the_concepts():
    folders = sorted(
        p.name
        for p in (ROOT / "toolkit").iterdir()
        if p.is_dir() and p.name.startswith("_") and p.name != "__pycache__"
    )
    assert {"_model", "_queueing", "_planning", "_sweep", "_calibration", "_validation", "_report", "_data"} <= set(
        folders
    )


# "under ~300 lines": a little slack for a docstring
MAX_MODULE_LINES = 320


def test_modules_stay_short():
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "toolkit").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_notebook_imports_private_modules():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            assert "toolkit._" not in source and "from toolkit import _" not in source, path.name


@pytest.mark.parametrize("entry", ["cost_model", "plan", "simulate"])
def test_every_tunable_efficiency_moves_every_entry_point(entry):
    from toolkit._model.efficiency import TUNABLE_EFFICIENCIES

    defaults = toolkit.efficiency_defaults()["value"]
    # tensor parallel 2 so that the all-reduce terms count; a short prompt keeps decode memory-bound;
    # weight-only 4-bit weights so that converting them before a GEMM (dequant_gemm_tokens) counts
    setup = {"model": "Llama-3.1-8B", "gpu": "H100 SXM", "quant": "int4"}

    def measure(calibration):
        if entry == "cost_model":
            cm = toolkit.cost_model(
                setup["model"], setup["gpu"], setup["quant"], tensor_parallel=2, calibration=calibration
            )
            return cm.step_ms(8, 8 * 1024) + cm.ttft_ms(512) + float(cm.step_ms(1, 1024, 2048))
        if entry == "plan":
            table = toolkit.plan(
                arrival_rate=2,
                prompt_tokens=512,
                output_tokens=128,
                models=setup["model"],
                gpus=setup["gpu"],
                quants=setup["quant"],
                backends="vLLM",
                tensor_parallel=(2,),
                calibration=calibration,
            )
            return float(table["ttft_ms"].sum() + table["tpot_ms"].sum())
        res = toolkit.simulate(
            setup["model"],
            setup["gpu"],
            setup["quant"],
            512,
            64,
            200,
            arrival_rate=4.0,
            tensor_parallel=2,
            calibration=calibration,
            seed=1,
        )
        return float(res.requests["e2e_s"].sum())

    base = measure(None)
    for name in TUNABLE_EFFICIENCIES:
        value = float(defaults[name])
        high = TUNABLE_EFFICIENCIES[name][1]
        changed = value * 0.5 if value > 0 else (5.0 if high is None else high / 2)
        assert measure({name: changed}) != pytest.approx(base, rel=1e-9), f"{entry} ignores {name}"


def test_a_built_wheel_carries_its_data(tmp_path):
    """Build the wheel, install it into a fresh venv outside the clone, and read a catalog."""
    wheel_dir = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheel_dir), str(ROOT)],
        check=True,
    )
    wheel = next(wheel_dir.glob("*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)], check=True
    )
    # the dependencies come from this environment's site-packages (appended, so the editable
    # install of the clone is not what gets imported: its finder lives in a .pth not processed here)
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "deps.pth").write_text("\n".join(deps) + "\n")
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import toolkit; print(toolkit.__file__); print(len(toolkit.gpus()))"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    path, count = out.stdout.split()
    assert path.startswith(str(site)), path
    assert int(count) > 10
