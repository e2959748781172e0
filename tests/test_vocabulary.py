"""One vocabulary for every layer, and keyword-only signatures whose old positional spelling still
works for one release with a DeprecationWarning."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest

import toolkit
from toolkit._vocab.keywords import positional_deprecated
from toolkit._vocab.metrics import LATENCY_METRICS, SIMULATED_METRICS, ms_from_s, percentile_label, quantile_column

ROOT = Path(__file__).resolve().parent.parent


# ---- the decorator ---------------------------------------------------------------------------------------


@positional_deprecated
def _area(width_m, *, height_m=1.0, scale=1.0):
    return width_m * height_m * scale


def test_a_keyword_call_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _area(2.0, height_m=3.0, scale=10.0) == 60.0


def test_an_old_positional_call_warns_with_the_keyword_spelling_and_gives_the_same_result():
    with pytest.warns(DeprecationWarning, match=r"_area\(\): passing height_m, scale by position") as record:
        old = _area(2.0, 3.0, 10.0)
    assert "_area(..., height_m=..., scale=...)" in str(record[0].message)
    assert record[0].filename == __file__  # it points at the call, not at the wrapper
    assert old == 60.0


def test_positional_and_keyword_for_one_argument_is_an_error():
    with pytest.raises(TypeError, match="multiple values for argument 'height_m'"):
        _area(2.0, 3.0, height_m=4.0)
    with pytest.raises(TypeError, match="at most 3 arguments"):
        _area(1.0, 2.0, 3.0, 4.0)


def test_the_wrapper_keeps_the_signature_and_a_coroutine_stays_one():
    @positional_deprecated
    async def fetch(url, *, timeout_s=1.0):
        return url, timeout_s

    assert list(inspect.signature(_area).parameters) == ["width_m", "height_m", "scale"]
    assert inspect.iscoroutinefunction(fetch)


WIDE = {
    "simulate": 3,
    "plan": 3,
    "predict_sweep": 3,
    "cost_model": 3,
    "ttft_ms": 4,
    "calibrate": 4,
    "batching_curve": 4,
    "memory": 4,
    "queue_wait": 2,
    "compare_wait_models": 1,
    "load_trace": 1,
    "run_sweep": 3,
    "sweep": 3,
    "LlamaServer": 1,
    "CostModel": 0,
}


@pytest.mark.parametrize("name", sorted(WIDE))
def test_wide_public_functions_take_all_but_their_first_arguments_by_keyword(name):
    kinds = [p.kind for p in inspect.signature(getattr(toolkit, name)).parameters.values()]
    positional = sum(k is inspect.Parameter.POSITIONAL_OR_KEYWORD for k in kinds)
    assert positional == WIDE[name]
    assert kinds.count(inspect.Parameter.KEYWORD_ONLY) == len(kinds) - positional


def test_no_other_public_function_or_class_takes_more_than_five_arguments_by_position():
    for name in sorted(set(toolkit.__all__) - set(WIDE)):
        params = inspect.signature(getattr(toolkit, name)).parameters.values()
        positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert len(positional) <= 5, f"{name} takes {len(positional)} arguments by position"


def test_a_class_warns_under_its_own_name():
    cm = toolkit.cost_model("Llama-3.1-8B", "H100 SXM", "bf16")
    fields = [getattr(cm, f.name) for f in dataclasses.fields(cm)]
    with pytest.warns(DeprecationWarning, match=r"^CostModel\(\): passing model, gpu"):
        assert toolkit.CostModel(*fields) == cm


def test_simulate_old_positional_spelling_warns_and_agrees_with_the_keywords():
    new = toolkit.simulate("Llama-3.1-8B", "H100 SXM", "bf16", prompt_tokens=256, output_tokens=32, num_requests=40,
                           arrival_rate=2.0, seed=3)  # fmt: skip
    with pytest.warns(DeprecationWarning, match="prompt_tokens=..., output_tokens=..., num_requests=..."):
        old = toolkit.simulate("Llama-3.1-8B", "H100 SXM", "bf16", 256, 32, 40, arrival_rate=2.0, seed=3)
    pd.testing.assert_frame_equal(old.requests, new.requests)


def test_the_old_mfu_mbu_orders_of_ttft_ms_and_cost_model_both_still_land():
    # ttft_ms took (..., prompt_tokens, tensor_parallel, mfu, mbu), cost_model (..., calibration, mbu, mfu)
    setup = ("Llama-3.1-8B", "H100 SXM", "bf16")
    with pytest.warns(DeprecationWarning):
        old_ttft = toolkit.ttft_ms(*setup, 1024, 1, 0.2, 0.3)
    with pytest.warns(DeprecationWarning):
        old_cm = toolkit.cost_model(*setup, 1, "fp16", None, 0.3, 0.2)
    assert old_ttft == toolkit.ttft_ms(*setup, 1024, mfu=0.2, mbu=0.3, tensor_parallel=1)
    new_cm = toolkit.cost_model(*setup, mbu=0.3, mfu=0.2)
    assert old_cm.ttft_ms(1024) == new_cm.ttft_ms(1024)
    # the two knobs are where they were put: halving mfu alone slows a long prefill
    assert toolkit.ttft_ms(*setup, 8192, mfu=0.1, mbu=0.3) > toolkit.ttft_ms(*setup, 8192, mfu=0.2, mbu=0.3)


def test_a_warning_raised_inside_points_at_the_callers_line():
    with pytest.warns(UserWarning, match="tail under-estimates") as record:
        toolkit.queue_wait(0.5, 1.0, cs2=8.0)
    assert record[0].filename == __file__


# ---- metric names and units -------------------------------------------------------------------------------


def test_metric_names_and_units():
    assert LATENCY_METRICS == ("ttft", "tpot", "e2e") and SIMULATED_METRICS[1:] == LATENCY_METRICS
    assert percentile_label(0.95) == "95" and percentile_label(0.999) == "99.9"
    assert quantile_column("e2e", 0.99, "ms") == "e2e_p99_ms"
    assert ms_from_s(1.5) == 1500.0


def test_the_simulator_and_the_scale_out_name_their_columns_from_one_list():
    res = toolkit.simulate("Llama-3.1-8B", "H100 SXM", "bf16", prompt_tokens=128, output_tokens=16,
                           num_requests=30, arrival_rate=1.0)  # fmt: skip
    for metric in SIMULATED_METRICS:
        assert f"{metric}_s" in res.requests.columns
        assert {f"{metric}_{stat}_s" for stat in ("mean", "p50", "p95", "p99")} <= set(res.summary.columns)
    grid = toolkit.simulate_grid(
        [{"model": "Llama-3.1-8B", "gpu": "H100 SXM", "quant": "bf16", "prompt_tokens": 128, "output_tokens": 16,
          "num_requests": 30, "arrival_rate": 1.0}],
        percentiles=(0.9,), progress=False,
    )  # fmt: skip
    assert {quantile_column(m, 0.9, "s") for m in SIMULATED_METRICS} <= set(grid.columns)


def test_no_layer_renames_the_arrivals_variability():
    # ca2 publicly; not arrival_ca2, burst or a2 inside (arrivals.py's cv2 is its own argument name)
    pattern = re.compile(r"\b(arrival_ca2|burst|a2)\b")
    for path in sorted((ROOT / "toolkit").rglob("*.py")):
        names = {
            node.id if isinstance(node, ast.Name) else node.arg
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Name | ast.arg)
        }
        assert not {n for n in names if pattern.fullmatch(n)}, path.name


# ---- no positional None placeholders anywhere -----------------------------------------------------------


def _placeholder_calls(source: str) -> list[str]:
    """Calls in ``source`` that pass two or more ``None`` in a row by position."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            run = 0
            for arg in node.args:
                run = run + 1 if isinstance(arg, ast.Constant) and arg.value is None else 0
                if run == 2:
                    found.append(ast.unparse(node)[:100])
                    break
    return found


def _code(path: Path) -> list[str]:
    """The Python source in ``path``: a module, a notebook's code cells (IPython magics left out), or
    the fenced Python blocks of a Markdown or reStructuredText page."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return [text]
    if path.suffix == ".ipynb":
        cells = ["".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code"]
        return [
            "\n".join(line for line in cell.splitlines() if not line.lstrip().startswith(("%", "!"))) for cell in cells
        ]
    blocks = re.findall(r"```(?:python|py|ipython3?)\n(.*?)```", text, re.DOTALL)
    blocks += [
        re.sub(r"^(>>>|\.\.\.) ?", "", b, flags=re.M)
        for b in re.findall(r"((?:^>>>.*\n(?:^\.\.\..*\n)*)+)", text, re.M)
    ]
    return blocks


def _sources() -> list[Path]:
    found = [ROOT / "README.md"]
    folders = {
        "toolkit": ["*.py"],
        "tests": ["*.py"],
        "notebooks": ["*.ipynb"],
        "reports/example/notebooks": ["*.ipynb"],
        "docs": ["*.md", "*.rst", "*.py", "*.ipynb"],
    }
    for folder, patterns in folders.items():
        for pattern in patterns:
            found += sorted((ROOT / folder).rglob(pattern))
    return [p for p in found if p.is_file() and ".ipynb_checkpoints" not in p.parts and "_build" not in p.parts]


def test_the_placeholder_finder_finds_placeholders():
    assert _placeholder_calls("simulate(None, None, None, 1, trace=t)") == ["simulate(None, None, None, 1, trace=t)"]
    assert _placeholder_calls("x = (None, None)\nf(None, reason='r')\ng([None, None])") == []
    page = "```python\ntk.simulate('m', 'g', 'q', None, None, None, trace=hour)\n```\n"
    assert len(_placeholder_calls(_code_from_text(page))) == 1


def _code_from_text(page: str) -> str:
    return "\n".join(re.findall(r"```(?:python|py|ipython3?)\n(.*?)```", page, re.DOTALL))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_call_passes_none_placeholders_by_position(path):
    found = []
    for block in _code(path):
        try:
            found += _placeholder_calls(block)
        except SyntaxError:  # a fragment of a page, not a program: fall back to the text
            found += re.findall(r"\w\([^()]*\bNone,\s*None\b[^()]*\)", block)
    assert not found, f"{path.relative_to(ROOT)}: {found}"
