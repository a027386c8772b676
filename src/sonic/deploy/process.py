"""A child process (Envoy, Prometheus, a ``sonic serve`` replica) whose log says when it is ready.

Its stdout and stderr go through a pipe that one thread copies to a log file, so the pipe never
fills; each line is also handed to an optional listener (progress on the screen) and the first one
matching the ready pattern marks the child ready. A second thread waits for the process's exit.
Waiting is on a condition those threads notify, never on a timer. The child runs in a session of
its own: stopping it also kills whatever it left in its process group (a model's subprocess), so
nothing outlives the deployment.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO


class ChildStartError(RuntimeError):
    pass


class LoggedChild:
    def __init__(
        self,
        name: str,
        command: Sequence[str],
        log_path: Path,
        ready: re.Pattern[str],
        on_line: Callable[[str], None] | None = None,
        failed_start_stop_s: float = 10.0,  # how long one that failed to start gets after SIGTERM
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._ready_pattern = ready
        self._on_line = on_line
        self._failed_start_stop_s = failed_start_stop_s
        self.ready_line = ""  # the line that matched ``ready``
        self._changed = threading.Condition()
        self._lines = 0  # lines of output so far
        self._exited = False
        self.process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,  # its own process group, killed whole by stop()
        )
        assert self.process.stdout is not None
        self._copier = threading.Thread(
            target=self._copy, args=(self.process.stdout,), name=f"{name}-log", daemon=True
        )
        self._reaper = threading.Thread(target=self._reap, name=f"{name}-exit", daemon=True)
        self._copier.start()
        self._reaper.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def exited(self) -> bool:
        with self._changed:
            return self._exited

    def _copy(self, stream: IO[str]) -> None:
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in stream:
                log.write(line)
                log.flush()
                if self._on_line is not None:
                    self._on_line(line.rstrip("\n"))
                with self._changed:
                    self._lines += 1
                    if not self.ready_line and self._ready_pattern.search(line):
                        self.ready_line = line.strip()
                    self._changed.notify_all()

    def _reap(self) -> None:
        self.process.wait()  # a blocking wait for the exit, in this thread only
        with self._changed:
            self._exited = True
            self._changed.notify_all()

    def wait_exit(self) -> int:
        """Block until the process has exited; its exit code (negative: the signal)."""
        with self._changed:
            self._changed.wait_for(lambda: self._exited)
        return self.process.returncode

    def wait_ready(self, timeout_s: float, *, while_printing: bool = False) -> None:
        """Until the ready line; raises ChildStartError if the process exits first or ``timeout_s`` passes.

        ``while_printing``: the time-out counts from the last line of output, not from the start,
        so a child that is busy and says so (a replica loading one model after another) is never
        given up; 0 then means no limit at all.
        """
        limit = None if while_printing and timeout_s <= 0 else timeout_s
        failure = ""
        with self._changed:
            while not self.ready_line and not self._exited:
                if not self._changed.wait_for(self._news(self._lines, while_printing), limit):
                    silent = "printed nothing for" if while_printing else "was not ready within"
                    failure = f"{self.name} {silent} {timeout_s:g} s"
                    break
            ready = bool(self.ready_line)
        if ready:
            return
        code = self.stop(self._failed_start_stop_s)
        if not failure:
            failure = f"{self.name} exited with code {code} before ready"
        raise ChildStartError(f"{failure}; log:\n{self.tail()}")

    def _news(self, lines_seen: int, count_lines: bool) -> Callable[[], bool]:
        """The condition wait_ready waits for (called with the lock held)."""
        return lambda: bool(self.ready_line) or self._exited or (count_lines and self._lines != lines_seen)

    def tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def kill_group(self) -> None:
        """SIGKILL whatever is left of the child's process group (its own children, once it is gone).

        Safe after the child was reaped: Linux reuses no PID that is still some group's ID, so the
        group is either the child's or empty.
        """
        with contextlib.suppress(ProcessLookupError):  # the group is empty: nothing was left behind
            os.killpg(self.process.pid, signal.SIGKILL)

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, SIGKILL after ``timeout_s``, then the rest of its group; the log copier finishes
        before the pipe is closed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        code = self.process.wait()
        self.kill_group()  # its children held the pipe open too: the copier ends only after them
        self._copier.join()
        self._reaper.join()
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code
