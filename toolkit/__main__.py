"""Command line: ``python -m toolkit {plan,sweep,report,capacity,compare} ...``.

A user error (a bad argument, a missing file, a server that does not answer) ends in one line on
stderr and exit status 2, never a traceback; a warning is one line on stderr too; output piped into a
program that stops reading (``| head``) ends quietly. Only argparse is imported until a subcommand
runs, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import NoReturn

__all__: list[str] = []

USAGE_ERROR = 2


def _user_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ValueError, OSError, TimeoutError]
    if "httpx" in sys.modules:  # loaded only when a subcommand talked to a server
        errors.append(sys.modules["httpx"].HTTPError)
    return tuple(errors)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def _warn_one_line(message: Warning | str, *_: object, **__: object) -> None:
    print(f"warning: {_one_line(Warning(message) if isinstance(message, str) else message)}", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    """argparse's own errors (a value of the wrong type, an unknown or a missing option) as one line
    too, pointing at ``--help`` instead of printing the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"error: {_one_line(message)} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Run the command line and return its exit status."""
    # each subcommand's module loads here, so that ``import toolkit`` itself stays light
    from toolkit import __version__
    from toolkit._capacity import cli as _capacity
    from toolkit._interop import cli as _interop
    from toolkit._planning import cli as _planner
    from toolkit._report import cli as _report
    from toolkit._sweep import cli as _sweep_cli

    parser = _Parser(prog="python -m toolkit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"toolkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (_planner, _sweep_cli, _capacity, _interop, _report):  # report extends compare
        module.add_cli(sub)
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():  # restores showwarning for a caller that runs main() in-process
            warnings.showwarning = _warn_one_line
            return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader went away: point stdout at devnull so the interpreter's final flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except _user_errors() as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
