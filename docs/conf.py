"""Sphinx configuration: the PyData theme, numpydoc API pages, MyST Markdown and the notebooks rendered
from their stored outputs. The build reads nothing from the network: no intersphinx, no CDN scripts
(the theme bundles its assets; widget outputs show their static fallback)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import toolkit  # noqa: E402

project = "toolkit"
author = "the toolkit authors"
copyright = "the toolkit authors, Apache-2.0"
version = release = toolkit.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_nb",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
templates_path = ["_templates"]

# API pages: one per public name, generated at build time into generated/ (git-ignored)
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# MyST and the notebooks: rendered from the outputs stored in reports/example/notebooks/, never run
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"
nb_ipywidgets_js = {}  # no require.js or widget manager from a CDN
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_merge_streams = True

html_theme = "pydata_sphinx_theme"
html_title = f"toolkit {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_show_sourcelink = False
html_copy_source = False
