"""``sonic`` entry point: one module per subcommand, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from sonic import __version__
from sonic.cli import analyze, demo, models, perf, scale, serve


def _commands() -> list[ModuleType]:
    return [serve, models, demo, perf, analyze, scale]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sonic", description="SONIC: inference as a service for physics")
    parser.add_argument("--version", action="version", version=f"sonic {__version__}")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity"
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in _commands():
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
