"""Whether the compiled event loop matches its sources.

``setup.py`` compiles the event loop's modules with mypyc when it can and records the sha256 of each
.py file it compiled in ``_compiled_sources.json`` next to them. An editable install builds them in
place, where a compiled module shadows its .py file: an edit of the .py has no effect until the
next ``pip install -e .``. :func:`stale_compiled` names the modules in that state.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__: list[str] = []

_HERE = Path(__file__).parent
RECORD = _HERE / "_compiled_sources.json"
# the modules setup.py compiles, the list the Makefile reads too
COMPILED = tuple((_HERE / "compiled.txt").read_text().split())


def stale_compiled() -> list[str]:
    """The compiled modules' .py files whose contents changed since the build (empty when up to date
    or not compiled)."""
    if not RECORD.exists():
        return []
    built = json.loads(RECORD.read_text())
    return sorted(
        name for name, digest in built.items() if hashlib.sha256((_HERE / name).read_bytes()).hexdigest() != digest
    )
