"""What a person sees while ``sonic demo`` runs: logs in a file, progress bars and tables on the screen.

Libraries the demonstrators use (Dask's scheduler and nannies, the server manager, matplotlib) log
at INFO; between the tables those lines bury the results. :func:`route_logs` sends every record to
the demo's log file and only warnings and errors to the screen. :class:`Progress` is a rich progress
bar on a terminal and a few plain lines otherwise (CI logs, pipes).

rich comes with the ``demo`` extra (``pip install 'sonic-inference[demo]'``): it is imported when a
demo draws, never when this module is imported, so the rest of ``sonic`` (``sonic serve``, whose CLI
imports the demo's) runs without it; :func:`require_rich` says how to install it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from sonic.logs import TextFormatter

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress as RichProgress
    from rich.table import Table

RICH_MISSING = "sonic demo needs rich, which the demo extra installs: pip install 'sonic-inference[demo]'"


def require_rich() -> None:
    """ImportError saying how to install rich when it is missing (before a demo starts, not midway)."""
    try:
        import rich  # noqa: F401, PLC0415  (the demo extra: see the module docstring)
    except ImportError as exc:
        raise ImportError(RICH_MISSING) from exc


def route_logs(log_path: Path) -> logging.FileHandler:
    """Every log record into ``log_path``; only WARNING and above to the screen (stderr).

    Returns the file handler, which the caller removes (and closes) when the demo ends.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for handler in root.handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.setLevel(max(handler.level, logging.WARNING))
    file_handler = logging.FileHandler(log_path, encoding="utf-8")
    file_handler.setFormatter(TextFormatter())
    root.addHandler(file_handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    return file_handler


def console(stream: TextIO | None = None) -> Console:
    """A rich console on ``stream`` (stdout by default); plain text, 120 columns, when it is not a terminal."""
    from rich.console import Console  # noqa: PLC0415  (the demo extra)

    target = stream or sys.stdout
    width = None if target.isatty() else 120  # rich's default of 80 wraps the summary's headers in logs
    return Console(file=target, highlight=False, soft_wrap=True, width=width)


class Progress:
    """A progress bar for ``total`` steps, called with the count done; plain lines when not on a terminal.

    The bar draws on each update (no refresh thread) and finishes when ``done`` reaches ``total``.
    """

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        from rich.console import Console  # noqa: PLC0415  (the demo extra)
        from rich.progress import (  # noqa: PLC0415
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as RichProgress  # noqa: PLC0415

        self.label, self.total = label, max(1, total)
        self._console = Console(file=stream or sys.stderr, highlight=False)
        self._bar: RichProgress | None = None
        self._task: Any = None
        self._last_half = -1
        if self._console.is_terminal:
            self._bar = RichProgress(
                TextColumn("{task.description:<40}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self._console,
                auto_refresh=False,
                # A run that fails mid-bar must not leave stdout captured by the live display.
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._task = self._bar.add_task(label, total=self.total)
            self._bar.start()

    def __call__(self, done: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, refresh=True)
            if done >= self.total:
                self._bar.stop()
            return
        # Not a terminal: the start, the half and the end, each once.
        half = 2 * done // self.total
        if half > self._last_half:
            self._last_half = half
            self._console.print(f"  {self.label}: {done}/{self.total}")


def rich_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """A rich table; floats with 4 significant digits."""
    from rich.table import Table  # noqa: PLC0415  (the demo extra)

    result = Table(title=title, title_justify="left")
    for header in headers:
        result.add_column(header)
    for row in rows:
        result.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))
    return result
