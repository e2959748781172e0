"""The package's shape: one ``__all__`` per private module, the public API their union, package
data in the wheel, and one list of tunable efficiencies that every entry point honours."""

from __future__ import annotations

import ast
import importlib
import io
import json
import pkgutil
import re
import subprocess
import sys
import tokenize
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
    # the planner prices the batches its queue implies: on an L4 (beside the H100) two requests/s keep
    # more than four running, so a step's rows of logits can leave a remainder (logit_remainder_reads)
    plan_gpus = (setup["gpu"], "L4")

    def measure(calibration):
        if entry == "cost_model":
            cm = toolkit.cost_model(
                setup["model"], setup["gpu"], setup["quant"], tensor_parallel=2, calibration=calibration
            )
            # 6 sequences: rows of logits above four and not a multiple of four (logit_remainder_reads)
            return (
                cm.step_ms(8, 8 * 1024) + cm.step_ms(6, 6 * 1024) + cm.ttft_ms(512) + float(cm.step_ms(1, 1024, 2048))
            )
        if entry == "plan":
            table = toolkit.plan(
                arrival_rate=2,
                prompt_tokens=512,
                output_tokens=128,
                models=setup["model"],
                gpus=plan_gpus,
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
            prompt_tokens=512,
            output_tokens=64,
            num_requests=200,
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


# ---- comments and docstrings say what and why, not when ------------------------------------------------

_NUMBER = (
    r"(?:\d[\d,]*|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
    r"sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty)"
)
# what a diary writes: a date, a clock time, or how many times something was run
_DIARY = {
    "a date": re.compile(r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b"),
    "a clock time": re.compile(r"\b(?:[01]?\d|2[0-3]):[0-5]\d\b"),
    "a run count": re.compile(
        rf"\b(?:(?:in|over|across|of|from|after)\s+(?:the\s+last\s+)?{_NUMBER}\s+(?:[\w/-]+\s+){{0,2}}"
        rf"(?:runs|passes|sessions)\b|(?<!the ){_NUMBER}\s+(?:idle\s+|report\s+)?runs\b|this (?:project|machine)'s \w+ runs\b)",
        re.IGNORECASE,
    ),
}


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and every string that stands as a statement of its own (module,
    class and function docstrings, attribute docstrings) in ``path``."""
    source = path.read_text()
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.append((node.lineno, node.value.value))
    return found


def test_the_diary_detector_finds_what_it_is_for():
    hits = lambda text: sorted(kind for kind, pattern in _DIARY.items() if pattern.search(text))  # noqa: E731
    assert hits("fitted on 2026-12-04 at 18:24") == ["a clock time", "a date"]
    assert hits("the spread over 15 passes") == ["a run count"]
    assert hits("missed in ten idle runs") == ["a run count"]
    assert hits("this machine's sixteen runs agreed") == ["a run count"]
    assert hits("2 runs of 300 requests rose above 0.05") == ["a run count"]
    assert hits("a ratio of 3 to 1; runs each level twice; p99 over the two passes' waves") == []
    assert hits("panel titles for the two runs; a cell of one or more passes; if one already runs") == []


def test_no_date_clock_time_or_run_count_in_comments_and_docstrings():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {kind}: {match.group(0)!r}"
        for path in sorted((ROOT / "toolkit").rglob("*.py"))
        for line, text in _comments_and_docstrings(path)
        for kind, pattern in _DIARY.items()
        for match in pattern.finditer(text)
    ]
    assert not found, "comments and docstrings say what and why; dates and run counts belong in the\n" + "\n".join(
        found
    )


# ---- the import graph ----------------------------------------------------------------------------------

# The layers, bottom first: a module imports only from its own layer's subpackage or a lower one. The
# ground floor holds the argument checks, the file reader, shared statistics, the progress bar, the
# package data and the vocabulary every layer shares.
LAYERS = (
    {"_args", "_files", "_stats", "_progress", "_data", "_vocab", "_environment"},
    {"_model"},
    {"_queueing"},
    {"_workload"},
    {"_scale"},
    {"_planning"},
    {"_calibration"},
    {"_sweep"},
    {"_capacity", "_interop"},
    {"_validation"},
    {"_report"},
    {"__main__"},
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _toolkit_imports() -> dict[str, set[str]]:
    """Every toolkit module -> the toolkit modules it imports, at module level or inside a function
    (``from toolkit._x import y`` counts as an import of ``toolkit._x.y`` where that is a module)."""
    # (the package's own __init__ imports nothing: it loads the public names lazily)
    paths = {_module_name(p): p for p in (ROOT / "toolkit").rglob("*.py") if p != ROOT / "toolkit" / "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                for alias in node.names:
                    targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base)
        graph[name] = {t for t in targets if t.startswith("toolkit.") and t in paths and t != name}
    return graph


def _subpackage(module: str) -> str:
    return module.split(".")[1]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_between_modules():
    assert _cycle(_toolkit_imports()) is None


def test_no_import_cycle_between_subpackages():
    graph: dict[str, set[str]] = {}
    for module, targets in _toolkit_imports().items():
        graph.setdefault(_subpackage(module), set()).update(
            _subpackage(t) for t in targets if _subpackage(t) != _subpackage(module)
        )
    assert _cycle(graph) is None


def test_every_import_runs_down_the_layers():
    layer = {sub: level for level, subs in enumerate(LAYERS) for sub in subs}
    modules = _toolkit_imports()
    assert {_subpackage(m) for m in modules} == set(layer), "a subpackage is missing from LAYERS"
    upward = [
        f"{module} imports {target}"
        for module, targets in sorted(modules.items())
        for target in sorted(targets)
        if layer[_subpackage(target)] > layer[_subpackage(module)]
    ]
    assert not upward, "\n".join(upward)
