"""Which asyncio event loop a command runs on: ``--loop auto`` (uvloop when installed), ``asyncio`` or
``uvloop``. ``sonic serve`` and ``sonic perf`` both take it.

uvloop is the default because its transports write a list of buffers with one ``writev`` and read into the
protocol's own memory without a copy; Python 3.11's own ``writelines`` joins the buffers first (a copy of
every request a load generator sends: 15.6 MB per large request)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

LOOP_CHOICES = ("auto", "asyncio", "uvloop")


def add_loop_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loop",
        choices=LOOP_CHOICES,
        default="auto",
        help="event loop: uvloop when installed (auto), or the standard one",
    )


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for ``asyncio.Runner`` (None: the standard loop). Raises ImportError when ``uvloop`` is
    asked for and not installed."""
    if choice == "asyncio":
        return None
    try:
        import uvloop  # noqa: PLC0415  (optional speed-up)
    except ImportError:
        if choice == "uvloop":
            message = "--loop uvloop needs uvloop: pip install uvloop"
            raise ImportError(message) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
