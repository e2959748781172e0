"""Compiles the simulator's event loop with mypyc (the same type-annotated .py files, see README
"Developing"); the pure-Python modules run wherever the build is skipped or fails (no C compiler,
``TOOLKIT_PURE_PYTHON=1``), so it never makes an install fail."""

import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

# the event loop, a replica's state, the decode-run fit and the prefix caches (the cost model stays Python):
# one list, in toolkit/_queueing/compiled.txt, that the Makefile and toolkit._queueing.build_check read too
COMPILED = [f"toolkit/_queueing/{name}" for name in Path("toolkit/_queueing/compiled.txt").read_text().split()]


def _record(cmd):
    """Where the digests of the compiled sources go: next to the compiled modules."""
    return os.path.join(os.path.dirname(cmd.get_ext_fullpath("toolkit._queueing.event_loop")), "_compiled_sources.json")


class OptionalBuildExt(build_ext):
    """build_ext that leaves the pure-Python modules in place when compiling fails."""

    def run(self):
        try:
            super().run()
        except (Exception, SystemExit) as exc:  # no compiler, missing headers: the .py files still work
            for path in [*self.get_outputs(), _record(self)]:
                if os.path.exists(path):
                    os.remove(path)
            print(f"toolkit: compiling the event loop failed ({exc}); using the pure-Python modules", file=sys.stderr)
            return
        if self.extensions:  # the sources compiled, for toolkit._queueing.build_check
            digests = {os.path.basename(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in COMPILED}
            with open(_record(self), "w") as f:
                json.dump(digests, f, indent=1)


def _extensions():
    if os.environ.get("TOOLKIT_PURE_PYTHON") == "1":
        return []
    try:
        from mypyc.build import mypycify

        # (numpy, imported by piecewise.py, is not in the isolated build environment: mypy treats it as Any)
        return mypycify(
            ["--ignore-missing-imports", *COMPILED], opt_level="3", group_name="toolkit._queueing._compiled"
        )
    except (Exception, SystemExit) as exc:  # mypy exits on a type error
        print(f"toolkit: mypyc unavailable ({exc}); using the pure-Python modules", file=sys.stderr)
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
