"""The documentation's coverage: every public name in the API reference, every notebook a page, the
README short, the old README's sections in the docs, one licence text. The site itself is built, with
warnings as errors, by ``make docs`` (which ``make test`` runs)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import toolkit

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _autosummary_names() -> list[str]:
    """The names listed under the ``autosummary`` directives of docs/api.rst."""
    names, listing = [], False
    for line in (DOCS / "api.rst").read_text().splitlines():
        if line.startswith(".. autosummary::"):
            listing = True
        elif listing and line and not line.startswith(" "):
            listing = False
        elif listing and (m := re.fullmatch(r" {3}([A-Za-z_]\w*)", line)):
            names.append(m.group(1))
    return names


def test_the_api_reference_lists_every_public_name_once():
    names = _autosummary_names()
    assert sorted(set(names)) == sorted(toolkit.__all__), "docs/api.rst and toolkit.__all__ differ"
    assert len(names) == len(set(names)), "a name is listed twice in docs/api.rst"


def _toctree_entries(page: Path) -> list[str]:
    text = page.read_text()
    entries = []
    for block in re.findall(r"```\{toctree\}\n(.*?)```", text, flags=re.S):
        entries += [line.strip() for line in block.splitlines() if line.strip() and not line.startswith(":")]
    return entries


@pytest.mark.parametrize("notebook", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_every_notebook_has_a_page_with_its_executed_outputs(notebook):
    page = DOCS / "notebooks" / notebook
    # the page is the executed copy make report writes, linked from docs/notebooks/
    assert page.is_symlink() and page.resolve() == (ROOT / "reports" / "example" / "notebooks" / notebook).resolve()
    assert page.exists(), f"{notebook} has no executed copy in reports/example/notebooks/ (run make report)"
    assert Path(notebook).stem in _toctree_entries(DOCS / "notebooks" / "index.md")
    executed = json.loads(page.read_text())
    source = json.loads((ROOT / "notebooks" / notebook).read_text())
    # the executed copy is of this notebook (its cells one for one; an edit inside a cell shows on the
    # page once make report runs the notebook again), with outputs to show
    kinds = [c["cell_type"] for c in source["cells"]]
    assert [c["cell_type"] for c in executed["cells"]] == kinds, f"{notebook} gained or lost cells since make report"
    assert any(c.get("outputs") for c in executed["cells"] if c["cell_type"] == "code")


def test_every_page_is_in_a_toctree():
    pages = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md")} | {"api"}
    pages |= {p.relative_to(DOCS).with_suffix("").as_posix() for p in (DOCS / "notebooks").glob("*.ipynb")}
    listed = {"index"}
    for page in DOCS.rglob("*.md"):
        folder = page.parent.relative_to(DOCS).as_posix()
        listed |= {(e if folder == "." else f"{folder}/{e}") for e in _toctree_entries(page)}
    assert pages - {p for p in pages if p.startswith(("_build", "generated"))} <= listed


def test_readme_fits_on_a_screen_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 200
    opening = lines[lines.index("```sh") + 1 :]
    block = opening[: opening.index("```")]
    assert len(block) == 2 and block[0].startswith("make report") and block[1].startswith("make test")


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to a missing {target}"


# each `##` section of the README before it was split, and the docs page that holds it now
OLD_README_SECTIONS = {
    "What it answers": "getting-started.md",
    "The serving model in one paragraph": "methodology/serving-model.md",
    "Checked against a real GPU (an H200 measured by this project)": "methodology/gpu-reference.md",
    "Where we differ from the chimeraforge 0.6.0 planner": "methodology/chimeraforge.md",
    "Queueing: where the closed form fails": "methodology/queueing.md",
    "Trusting a prediction on your own server": "methodology/trust.md",
    "The concurrency sweep": "guide/sweep.md",
    "Notebooks": "notebooks/index.md",
    "Data": "data.md",
    "Scale-out on Dask": "guide/scale-out.md",
    "Developing": "developing.md",
    "Licence": "data.md",
    "Layout": "developing.md",
}


@pytest.mark.parametrize("heading, page", OLD_README_SECTIONS.items())
def test_the_old_readme_sections_are_headings_in_the_docs(heading, page):
    headings = [line.lstrip("#").strip() for line in (DOCS / page).read_text().splitlines() if line.startswith("#")]
    assert heading in headings


def test_the_changelog_is_a_keep_a_changelog_file_and_a_docs_page():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog") and "## [Unreleased]" in text
    sections = re.findall(r"^### (\w+)$", text, flags=re.M)
    assert sections and set(sections) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    assert "../CHANGELOG.md" in (DOCS / "changelog.md").read_text()


def test_the_top_level_licence_is_the_one_the_wheel_ships():
    assert (ROOT / "LICENSE").read_bytes() == (ROOT / "toolkit" / "LICENSE").read_bytes()


def test_the_docs_build_reads_nothing_from_the_network():
    conf = (DOCS / "conf.py").read_text()
    assert "sphinx.ext.intersphinx" not in conf
    assert 'nb_execution_mode = "off"' in conf
    assert "nb_ipywidgets_js = {}" in conf  # MyST-NB would otherwise load widget scripts from a CDN


# the repository's fixed layout: what a newcomer finds at the top level
TOP_LEVEL = {
    ".ci",
    ".gitignore",
    "CHANGELOG.md",
    "LICENSE",
    "Makefile",
    "README.md",
    "data",
    "docs",
    "environment.yml",
    "notebooks",
    "pyproject.toml",
    "reports",
    "setup.py",  # the mypyc build of the event loop
    "tests",
    "toolkit",
}


def test_the_top_level_keeps_the_fixed_layout():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert {line.split("/")[0] for line in tracked.splitlines()} <= TOP_LEVEL


def test_the_readme_example_runs_as_written_without_deprecated_calls(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks, "the README has no Python example"
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", str(script)], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_readme_maps_every_public_name():
    readme = (ROOT / "README.md").read_text()
    assert [name for name in toolkit.__all__ if f"`{name}`" not in readme] == []
