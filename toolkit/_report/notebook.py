"""Setting up a notebook so that charts render offline and tables show whole values."""

from __future__ import annotations

import importlib.util
import os

import altair as alt
import pandas as pd

from toolkit._args import check_choice

__all__ = ["notebook_setup"]

RENDERERS = ("auto", "jupyter", "svg")
RENDERER_ENV = "TOOLKIT_NOTEBOOK_RENDERER"  # overrides "auto" (build_report sets "svg")


def notebook_setup(renderer: str = "auto") -> str:
    """Make Altair charts render without internet access, in JupyterLab and in classic Notebook.

    Altair's default renderer loads Vega's JavaScript from a CDN, so on an air-gapped machine a
    chart shows an error instead. The renderers set here never fetch anything: ``"jupyter"`` draws
    interactive charts through an anywidget whose Vega bundle comes from the installed
    ``vl-convert-python`` package, ``"svg"`` renders each chart to a static SVG in the kernel. Also
    sets pandas to show whole cell values (no "..." in text columns).

    Parameters
    ----------
    renderer : {"auto", "jupyter", "svg"}
        ``"auto"`` takes the environment variable ``TOOLKIT_NOTEBOOK_RENDERER`` when set (the report
        executes its notebooks with ``svg``, so their saved copies stay small), else ``"jupyter"``
        when ``anywidget`` is installed (the ``notebooks`` extra installs it), else ``"svg"``.

    Returns
    -------
    str
        The renderer enabled (``"jupyter"`` or ``"svg"``).
    """
    renderer = check_choice("renderer", renderer, RENDERERS)
    if renderer == "auto" and os.environ.get(RENDERER_ENV):
        renderer = check_choice(RENDERER_ENV, os.environ[RENDERER_ENV], RENDERERS[1:])
    if renderer == "auto":
        renderer = "jupyter" if importlib.util.find_spec("anywidget") else "svg"
    if renderer == "jupyter":
        alt.renderers.enable("jupyter", offline=True)
    else:
        alt.renderers.enable("svg")
    pd.set_option("display.max_colwidth", None)
    return renderer
