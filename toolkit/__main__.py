"""Command line: ``python -m toolkit {plan,sweep,report} ...``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command line and return its exit status."""
    from toolkit._planning import cli as _planner
    from toolkit._report import cli as _report
    from toolkit._sweep import cli as _sweep_cli

    parser = argparse.ArgumentParser(prog="python -m toolkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (_planner, _sweep_cli, _report):
        module.add_cli(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
