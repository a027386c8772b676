"""The local fallback server: started when no reachable server has a model, stopped by PID at the end.

Three ways to run it, as CMSSW's fallback options allow: our ``sonic serve`` (default), a
``tritonserver`` binary given by path, or Triton in a container (apptainer, docker or podman); each
is a launcher of :mod:`sonic.launch`.
Ports are picked free at launch; the launch is retried ``retries`` times (a port may be taken
between picking and binding).

A job has one fallback server, as CMSSW's TritonService starts one per job: :class:`SharedFallback`
hands the same server to every client of the process (every model, every workflow module) with the
same fallback settings, starts it in explicit model control mode (``sonic serve`` and ``tritonserver``;
a container loads its whole repository), loads each model when a client first needs it, and stops it
when the last client using it closes (or at interpreter exit).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import tempfile
import threading
from pathlib import Path
from typing import ClassVar

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

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

    def __init__(self, config: FallbackConfig, *, explicit: bool = False) -> None:
        """``explicit``: start with no model loaded; :meth:`load` loads them (not in a container)."""
        self.config = config
        self.explicit = explicit and not config.container
        self._sonic: ServerProcess | None = None
        self._triton: TritonProcess | None = None

    @property
    def running(self) -> bool:
        process = self._sonic or self._triton
        return process is not None and process.process.poll() is None

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
                extra_args=["--model-control-mode=explicit"] if self.explicit else [],
                binary=self.config.tritonserver_path,
                wait_timeout_s=self.config.wait_timeout_s,
                workdir=workdir,
                log_path=log_path,
            )
            return self._triton.grpc_address
        extra = ["--gpus", "0"] if device is Device.CPU else []
        if self.explicit:
            extra += ["--model-control-mode", "explicit"]
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

    def load(self, address: str, model: str) -> None:
        """Load ``model`` (blocking); a model the repositories lack is a NoServerError naming them."""
        with grpc.insecure_channel(address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            try:
                stub.RepositoryModelLoad(
                    service_pb2.RepositoryModelLoadRequest(model_name=model),
                    timeout=self.config.wait_timeout_s,
                )
            except grpc.RpcError as exc:
                repositories = ", ".join(str(r) for r in self.config.repositories)
                detail = str(exc.details()) if hasattr(exc, "details") else str(exc)
                msg = f"fallback server: model '{model}' could not be loaded from {repositories}: {detail}"
                raise NoServerError(msg) from None
        log.info("fallback server %s loaded model '%s'", self.config.instance_name, model)


class SharedFallback:
    """The process's fallback server for one :class:`FallbackConfig`, shared by every client using it.

    A process-wide table is the point here (one server per job, whatever the number of clients and
    event loops), so it is a class attribute behind a lock. Clients :meth:`acquire` a share when they
    first need the server, call :meth:`ensure` (blocking: run it in a thread) for each model, and
    :meth:`release` the share on close; the last release stops the server.
    """

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _shared: ClassVar[dict[FallbackConfig, SharedFallback]] = {}

    def __init__(self, config: FallbackConfig) -> None:
        self.server = FallbackServer(config, explicit=True)
        self._users = 0
        self._address = ""
        self._loaded: set[str] = set()
        self._start_lock = threading.Lock()  # one start and one load at a time, across event loops

    @classmethod
    def acquire(cls, config: FallbackConfig) -> SharedFallback:
        with cls._lock:
            shared = cls._shared.get(config)
            if shared is None:
                shared = cls._shared[config] = cls(config)
                atexit.register(shared.stop)  # never left running by a job that forgot to close
            shared._users += 1
            return shared

    def ensure(self, model: str) -> str:
        """Started (again, if it died) with ``model`` loaded; returns the gRPC address."""
        with self._start_lock:
            if not self.server.running:
                self.server.stop()
                self._loaded.clear()
                self._address = self.server.start()
            if self.server.explicit and model not in self._loaded:
                self.server.load(self._address, model)
                self._loaded.add(model)
            return self._address

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0:
                return
            if self._shared.get(self.server.config) is self:
                del self._shared[self.server.config]
        self.stop()

    def stop(self) -> None:
        atexit.unregister(self.stop)
        with self._start_lock:
            self.server.stop()
            self._loaded.clear()


class FallbackUse:
    """One client's use of the process's fallback server: a share taken on first need, given back at close."""

    def __init__(self, config: FallbackConfig) -> None:
        self._config = config
        self._share: SharedFallback | None = None
        self._address = ""

    @property
    def server(self) -> FallbackServer | None:
        return None if self._share is None else self._share.server

    @property
    def address(self) -> str:
        """The gRPC address this client last connected to ("" before the first use)."""
        return self._address

    async def ensure(self, model: str) -> str | None:
        """Started with ``model`` loaded; the address when this client needs a new connection to it
        (first use, or the server was started again elsewhere), else None."""
        if self._share is None:
            # Taken first, so release() gives it back even if this task is cancelled.
            self._share = SharedFallback.acquire(self._config)
        address = await asyncio.to_thread(self._share.ensure, model)
        if address == self._address:
            return None
        self._address = address
        return address

    async def release(self) -> None:
        share, self._share = self._share, None
        if share is not None:
            await asyncio.to_thread(share.release)  # the last client of the process stops it
