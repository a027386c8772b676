"""A child process (Envoy, Prometheus) whose log says when it is ready.

Its stdout and stderr go through a pipe that one thread copies to a log file, so the pipe never
fills; the thread sets an event on the first line matching the ready pattern. Waiting is on that
event (or the process's end), never on a timer.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO


class ChildStartError(RuntimeError):
    pass


class LoggedChild:
    def __init__(self, name: str, command: Sequence[str], log_path: Path, ready: re.Pattern[str]) -> None:
        self.name = name
        self.log_path = log_path
        self._ready_pattern = ready
        self.ready_line = ""  # the line that matched ``ready``
        self._ready = threading.Event()
        self._ended = threading.Event()
        self.process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        assert self.process.stdout is not None
        self._copier = threading.Thread(
            target=self._copy, args=(self.process.stdout,), name=f"{name}-log", daemon=True
        )
        self._copier.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _copy(self, stream: IO[str]) -> None:
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in stream:
                log.write(line)
                log.flush()
                if not self._ready.is_set() and self._ready_pattern.search(line):
                    self.ready_line = line.strip()
                    self._ready.set()
        self._ended.set()
        self._ready.set()  # wakes wait_ready, which then sees the end

    def wait_ready(self, timeout_s: float) -> None:
        if not self._ready.wait(timeout_s):
            self.stop()
            raise ChildStartError(f"{self.name} was not ready within {timeout_s:.0f} s; log:\n{self.tail()}")
        if self._ended.is_set():
            code = self.process.wait()
            raise ChildStartError(f"{self.name} exited with code {code} before ready; log:\n{self.tail()}")

    def tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, SIGKILL after ``timeout_s``; the log copier finishes before the pipe is closed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        code = self.process.wait()
        self._copier.join()
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code
