"""The local fallback server: started when no reachable server has a model, stopped by PID at the end.

Three ways to run it, as CMSSW's fallback options allow: our ``sonic serve`` (default), a
``tritonserver`` binary given by path, or Triton in a container (apptainer, docker or podman); each
is a launcher of :mod:`sonic.launch`.
Ports are picked free at launch; the launch is retried ``retries`` times (a port may be taken
between picking and binding).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from sonic.client.config import Device, FallbackConfig, FallbackServerKind
from sonic.client.errors import NoServerError
from sonic.launch import LaunchError, ServerProcess, free_port
from sonic.launch.container import start_triton_container, triton_container_command
from sonic.launch.triton import TritonProcess
from sonic.server.devices import detect_gpu_count

log = logging.getLogger(__name__)


def resolve_device(device: Device) -> Device:
    gpus = detect_gpu_count()
    if device is Device.GPU and gpus == 0:
        msg = "fallback server: device 'gpu' requested but no GPU was detected"
        raise NoServerError(msg)
    if device is Device.AUTO:
        return Device.GPU if gpus else Device.CPU
    return device


def container_command(config: FallbackConfig, grpc_port: int, device: Device) -> list[str]:
    """The command that runs Triton from ``config.image`` with the repositories mounted read-only."""
    return triton_container_command(
        config.container,
        config.image,
        config.repositories,
        grpc_port,
        gpu=device is Device.GPU,
        name=config.instance_name,
    )


class FallbackServer:
    """Blocking start and stop; the async client runs them in a worker thread."""

    def __init__(self, config: FallbackConfig) -> None:
        self.config = config
        self._sonic: ServerProcess | None = None
        self._triton: TritonProcess | None = None

    @property
    def pid(self) -> int | None:
        process = self._sonic or self._triton
        return process.pid if process is not None else None

    def start(self) -> str:
        """Launch and wait for readiness; returns the gRPC address."""
        device = resolve_device(self.config.device)
        errors: list[str] = []
        for attempt in range(self.config.retries + 1):
            try:
                return self._launch(device)
            except (LaunchError, OSError) as exc:
                errors.append(f"attempt {attempt + 1}: {exc}")
                log.warning("fallback server did not start (attempt %d): %s", attempt + 1, exc)
        raise NoServerError("fallback server could not be started:\n" + "\n".join(errors))

    def _workdir(self) -> Path:
        base = self.config.temp_dir
        if base is not None:
            base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{self.config.instance_name}-", dir=base))

    def _launch(self, device: Device) -> str:
        workdir = self._workdir()
        log_path = workdir / "server.log"
        repositories = list(self.config.repositories)
        if self.config.container:
            port = free_port()
            command = container_command(self.config, port, device)
            self._triton = start_triton_container(
                command, port, wait_timeout_s=self.config.wait_timeout_s, log_path=log_path
            )
            return self._triton.grpc_address
        if self.config.kind is FallbackServerKind.TRITONSERVER:
            self._triton = TritonProcess.start(
                repositories,
                binary=self.config.tritonserver_path,
                wait_timeout_s=self.config.wait_timeout_s,
                workdir=workdir,
                log_path=log_path,
            )
            return self._triton.grpc_address
        extra = ["--gpus", "0"] if device is Device.CPU else []
        self._sonic = ServerProcess.start(
            repositories, extra_args=extra, wait_timeout_s=self.config.wait_timeout_s, log_path=log_path
        )
        log.info("fallback server %s started on %s", self.config.instance_name, self._sonic.grpc_address)
        return self._sonic.grpc_address

    def stop(self) -> None:
        if self._sonic is not None:
            self._sonic.stop()
            self._sonic = None
        if self._triton is not None:
            self._triton.stop()
            self._triton = None
