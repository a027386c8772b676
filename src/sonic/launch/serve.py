"""``sonic serve`` as a subprocess: started on a free port, ready when it prints its ready line."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sonic.launch.process import LaunchError, ServerHandle, killed_after, start_process, temporary_log

# ``sonic: ready grpc=HOST:PORT [http=HOST:PORT] [metrics=HOST:PORT]``: parsed as generic KEY=VALUE fields.
READY_PATTERN = re.compile(r"^sonic: ready (?P<fields>.*)$")


class ServerStartError(LaunchError):
    pass


def wait_for_ready_line(process: subprocess.Popen[str], timeout_s: float) -> dict[str, str]:
    """Read the server's stdout until its ready line; returns the line's fields (``grpc`` -> address).

    Past ``timeout_s`` the process is killed (it failed to start) and ServerStartError says so."""
    assert process.stdout is not None
    with killed_after(process, timeout_s) as expired:
        for line in iter(process.stdout.readline, ""):
            match = READY_PATTERN.match(line.strip())
            if match:
                return dict(field.split("=", 1) for field in match["fields"].split())
    if expired.is_set():
        raise ServerStartError(f"sonic serve gave no ready line within {timeout_s:.0f} s (killed)")
    raise ServerStartError(f"sonic serve exited with code {process.wait()} before ready")


class ServerProcess(ServerHandle):
    """A running ``sonic serve``; use as a context manager so it is always stopped."""

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
        grpc_port: int = 0,
    ) -> ServerProcess:
        """``grpc_port``: 0 picks a free one; a given one restarts a server on the same address."""
        command = [sys.executable, "-m", "sonic.cli.main", "serve", "--host", host]
        command += ["--grpc-port", str(grpc_port)]
        for repository in repositories:
            command += ["--model-repository", str(repository)]
        command += list(extra_args)
        log_path = log_path or temporary_log("sonic-serve-")
        process, addresses = start_process(
            command,
            log_path,
            lambda started: wait_for_ready_line(started, wait_timeout_s),
            env=env,
            read_stdout=True,
        )
        return cls(process, addresses, log_path)
