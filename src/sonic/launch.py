"""Start ``sonic serve`` as a subprocess, wait for its ready line, stop it by PID.

Used by the demo, the tests, the benchmarks and the client's local fallback server.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

# ``sonic: ready grpc=HOST:PORT [http=HOST:PORT] [metrics=HOST:PORT]``: parsed as generic KEY=VALUE fields.
READY_PATTERN = re.compile(r"^sonic: ready (?P<fields>.*)$")


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


class ServerStartError(RuntimeError):
    pass


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


class ServerProcess:
    """A running ``sonic serve``; use as a context manager so it is always stopped."""

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

    def _address(self, field: str, flag: str) -> str:
        try:
            return self.addresses[field]
        except KeyError:
            raise KeyError(
                f"the server has no {field} endpoint; start it with {flag} (0: a free port)"
            ) from None

    @property
    def http_address(self) -> str:
        return self._address("http", "--http-port")

    @property
    def metrics_address(self) -> str:
        return self._address("metrics", "--metrics-port")

    @classmethod
    def start(
        cls,
        repositories: Sequence[Path],
        *,
        extra_args: Sequence[str] = (),
        host: str = "127.0.0.1",
        wait_timeout_s: float = 120.0,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> ServerProcess:
        command = [sys.executable, "-m", "sonic.cli.main", "serve", "--host", host, "--grpc-port", "0"]
        for repository in repositories:
            command += ["--model-repository", str(repository)]
        command += list(extra_args)
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="sonic-serve-", suffix=".log")
            os.close(handle)
            log_path = Path(name)
        with log_path.open("w") as log_file:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log_file, text=True, env=env, start_new_session=True
            )
        try:
            assert process.stdout is not None
            addresses = cls._wait_ready(process, process.stdout, wait_timeout_s, log_path)
        except BaseException:
            terminate(process, timeout_s=10)
            raise
        return cls(process, addresses, log_path)

    @staticmethod
    def _wait_ready(
        process: subprocess.Popen[str], stdout: IO[str], timeout_s: float, log_path: Path
    ) -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ServerStartError(
                        f"sonic serve gave no ready line within {timeout_s:.0f} s; log:\n{_tail(log_path)}"
                    )
                if not selector.select(remaining):
                    continue
                line = stdout.readline()
                if not line:
                    code = process.wait()
                    raise ServerStartError(
                        f"sonic serve exited with code {code} before ready; log:\n{_tail(log_path)}"
                    )
                match = READY_PATTERN.match(line.strip())
                if match:
                    return dict(field.split("=", 1) for field in match["fields"].split())

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (drain and exit 0), then SIGKILL after ``timeout_s``; returns the exit code."""
        return terminate(self.process, timeout_s)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
