"""Shared memory that outlives no one: this process's segments are unlinked at interpreter exit and,
when the caller allows it (``ClientConfig.handle_signals``), on SIGTERM and SIGINT.

The set of live segments is per process by nature (exit and signals are), so :func:`exit_cleanup`
makes one :class:`ExitCleanup` on first use and registers it with :mod:`atexit` then, not at import.
Signal handlers are installed only on request and from the main thread; each unlinks the segments
and then hands the signal to the handler that was there before (the default one: the process ends
as it would have). A SIGKILL gives no chance: the server reclaims those (:mod:`sonic.server.shm.regions`).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ExitCleanup:
    def __init__(self) -> None:
        self._paths: set[Path] = set()
        self._lock = threading.Lock()  # regions are made on several clients' event-loop threads
        self._previous: dict[int, Any] = {}

    def add(self, path: Path) -> None:
        with self._lock:
            self._paths.add(path)

    def discard(self, path: Path) -> None:
        with self._lock:
            self._paths.discard(path)

    def run(self) -> None:
        """Unlink every segment still listed (the mappings go with the process)."""
        with self._lock:
            paths, self._paths = self._paths, set()
        for path in paths:
            path.unlink(missing_ok=True)
        if paths:
            log.info("unlinked %d shared memory segment(s) left at exit", len(paths))

    def install_signal_handlers(self) -> bool:
        """Handle SIGTERM/SIGINT (once per process); False when not on the main thread."""
        if threading.current_thread() is not threading.main_thread():
            log.warning("shared memory cleanup on signals not installed: not on the main thread")
            return False
        for signum in SIGNALS:
            if signum not in self._previous:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.run()
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)  # ends the process as the signal would have


@functools.cache
def exit_cleanup() -> ExitCleanup:
    """The process's cleanup, registered with atexit when first asked for."""
    cleanup = ExitCleanup()
    atexit.register(cleanup.run)
    return cleanup
