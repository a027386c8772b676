"""The core every launcher shares: start a server process, wait until it is ready, stop it by PID.

A server runs in its own session with its output in a log file; a launcher gives the command and a
function that blocks until the server is ready (and returns its addresses). If that fails, the
process is stopped and the error says why, followed by the tail of the log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

# How long a server that failed to start gets to exit after SIGTERM before SIGKILL.
FAILED_START_STOP_S = 10.0


class LaunchError(RuntimeError):
    """A server did not start: why, and the tail of its log."""


def terminate(process: subprocess.Popen[Any], timeout_s: float) -> int:
    """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit code. Any stdout pipe is closed."""
    try:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                return process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
        return process.wait()
    finally:
        # Closed on every path: an open pipe left to the garbage collector is a ResourceWarning.
        if process.stdout is not None:
            process.stdout.close()


@contextlib.contextmanager
def killed_after(process: subprocess.Popen[Any], timeout_s: float) -> Iterator[threading.Event]:
    """Kill ``process`` if the block lasts past ``timeout_s`` (the event it yields is then set), so that a
    blocking ``readline`` of its output ends (EOF) instead of waiting forever.

    Why not ``select`` on the pipe: lines that Python's text wrapper has already read into its buffer are
    invisible to it, so a ready line that arrived in one chunk with earlier log lines would be waited for
    in vain until the deadline.
    """
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        process.kill()

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        yield expired
    finally:
        timer.cancel()


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (bind port 0, read it, release it), for servers that cannot bind 0."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def temporary_log(prefix: str) -> Path:
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=".log")
    os.close(handle)
    return Path(name)


def start_process(
    command: Sequence[str],
    log_path: Path,
    wait_ready: Callable[[subprocess.Popen[str]], dict[str, str]],
    *,
    env: dict[str, str] | None = None,
    read_stdout: bool = False,
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """Run ``command`` and block in ``wait_ready`` until it is ready; returns the process and its addresses.

    ``read_stdout``: stdout stays a pipe for ``wait_ready`` to read (a ready line) and stderr goes to the
    log; otherwise both go to the log.
    """
    with log_path.open("w") as log_file:
        process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE if read_stdout else log_file,
            stderr=log_file if read_stdout else subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: signals to ours do not reach it
        )
    try:
        return process, wait_ready(process)
    except BaseException as exc:
        terminate(process, FAILED_START_STOP_S)
        if isinstance(exc, LaunchError):
            raise type(exc)(f"{exc}; log:\n{log_tail(log_path)}") from None
        raise


class ServerHandle:
    """A started server: its process (stopped by PID), addresses and log. A context manager that stops it."""

    stop_timeout_s = 60.0  # SIGTERM drains; SIGKILL after this

    def __init__(self, process: subprocess.Popen[str], addresses: dict[str, str], log_path: Path) -> None:
        self.process = process
        self.addresses = addresses
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def grpc_address(self) -> str:
        return self.addresses["grpc"]

    def stop(self, timeout_s: float | None = None) -> int:
        """SIGTERM (the server drains and exits), then SIGKILL after ``timeout_s``; returns the exit code."""
        return terminate(self.process, self.stop_timeout_s if timeout_s is None else timeout_s)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
