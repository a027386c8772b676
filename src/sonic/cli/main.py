"""``sonic`` entry point: one module per subcommand, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from sonic import __version__
from sonic.cli import analyze, cmstriton, demo, deploy, models, perf, scale, serve, validate
from sonic.logs import configure_logging


def _commands() -> list[ModuleType]:
    return [serve, cmstriton, models, demo, perf, analyze, scale, deploy, validate]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sonic", description="SONIC: inference as a service for physics")
    parser.add_argument("--version", action="version", version=f"sonic {__version__}")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity"
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one object per line, for log shippers",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in _commands():
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
