"""``sonic`` entry point: one module per subcommand, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from sonic import __version__
from sonic.cli import analyze, cmstriton, demo, deploy, models, perf, scale, serve, validate
from sonic.logs import configure_logging
from sonic.perf.transport import PerfError
from sonic.protocol.errors import SonicError

log = logging.getLogger(__name__)

# What a user's input can cause (a missing file, a bad model, an unreachable server): one line, no traceback.
USER_ERRORS = (SonicError, PerfError, OSError)


def _commands() -> list[ModuleType]:
    return [serve, cmstriton, models, demo, perf, analyze, scale, deploy, validate]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default, except where there is none to show (None, a switch off)
    or its help text already names it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """Every parser of ``sonic``, subcommands' and theirs included (``add_subparsers`` makes its own kind)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="sonic", description="SONIC: inference as a service for physics")
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
    try:
        result: int = args.run(args)
    except USER_ERRORS as exc:
        log.debug("sonic %s failed", args.command, exc_info=True)  # the traceback, for --log-level DEBUG
        print(f"sonic {args.command}: {exc}", file=sys.stderr)
        return 1
    return result


if __name__ == "__main__":
    sys.exit(main())
