"""Run the real NVIDIA ``tritonserver`` (the binary shipped in the ``nvidia-pytriton`` wheel, or one given) on free ports.

Used by the client's fallback server, interoperability tests and benchmarks. Readiness is asked over
gRPC (ServerReady, then ModelReady for each expected model) with backoff until a deadline: Triton gives
no ready signal a launcher could wait on for every way it is run (a container, another KServe v2 server),
so :meth:`TritonProcess.launch` serves any such command. The process is stopped by PID, SIGTERM first.

The wheel's Python backend needs a stub built for the running Python; it is linked with the backend
library into a private backend directory, as pytriton itself does.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from sonic.launch.process import LaunchError, ServerHandle, free_port, start_process


class TritonStartError(LaunchError):
    pass


def pytriton_root() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        msg = "tritonserver is not installed: pip install nvidia-pytriton (it ships the binary)"
        raise TritonStartError(msg)
    return Path(next(iter(spec.submodule_search_locations)))


def tritonserver_binary() -> Path:
    return pytriton_root() / "tritonserver" / "bin" / "tritonserver"


def libs_path() -> Path:
    return pytriton_root().parent / "nvidia_pytriton.libs"


def prepare_backend_directory(workdir: Path) -> Path:
    """A backends/ folder whose python backend has the stub for this interpreter's version."""
    root = pytriton_root() / "tritonserver"
    target = workdir / "backends" / "python"
    target.mkdir(parents=True, exist_ok=True)
    for item in (root / "backends" / "python").iterdir():
        if item.is_file() and not (target / item.name).exists():
            (target / item.name).symlink_to(item)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise TritonStartError(f"no Triton Python backend stub for Python {version} in {stub.parent.parent}")
    link = target / "triton_python_backend_stub"
    if not link.exists():
        link.symlink_to(stub)
    return workdir / "backends"


def wait_until_ready(
    address: str, models: Sequence[str], timeout_s: float, process: subprocess.Popen[str] | None = None
) -> None:
    """Ask ServerReady and ModelReady with backoff until all say yes; raise on the deadline or exit."""
    deadline = time.monotonic() + timeout_s
    delay_s = 0.05
    last_error = "no answer yet"
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        while True:
            if process is not None and process.poll() is not None:
                raise TritonStartError(f"server exited with code {process.returncode} before it was ready")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TritonStartError(
                    f"server at {address} not ready within {timeout_s:.0f} s: {last_error}"
                )
            try:
                call_timeout_s = min(2.0, remaining)
                if stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=call_timeout_s).ready:
                    pending = [
                        m
                        for m in models
                        if not stub.ModelReady(
                            service_pb2.ModelReadyRequest(name=m), timeout=call_timeout_s
                        ).ready
                    ]
                    if not pending:
                        return
                    last_error = f"models not ready: {pending}"
                else:
                    last_error = "server not ready"
            except grpc.RpcError as exc:
                last_error = str(exc.details() if hasattr(exc, "details") else exc)
            # Backoff between readiness questions: the server gives no push signal over gRPC.
            time.sleep(min(delay_s, max(0.0, deadline - time.monotonic())))
            delay_s = min(delay_s * 2, 1.0)


def tritonserver_command(
    repositories: Sequence[Path],
    ports: dict[str, int],
    *,
    binary: Path | None = None,
    backend_directory: Path | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    command = [str(binary or tritonserver_binary())]
    command += [f"--model-repository={r}" for r in repositories]
    command += [
        f"--grpc-port={ports['grpc']}",
        f"--http-port={ports['http']}",
        f"--metrics-port={ports['metrics']}",
        "--allow-metrics=false",
        "--log-verbose=0",
        "--exit-timeout-secs=10",
        # The Python backend talks to its stubs through /dev/shm regions named by this prefix; two
        # servers on one host with the same (default) prefix overwrite each other's regions and crash
        # (python_backend's "Running Multiple Instances of Triton Server"). Unique per server, also
        # across a restart on the same port while a killed server's stubs may still hold theirs.
        f"--backend-config=python,shm-region-prefix-name=sonic_triton_{secrets.token_hex(6)}_",
    ]
    if backend_directory is not None:
        command.append(f"--backend-directory={backend_directory}")
    return command + list(extra_args)


class TritonProcess(ServerHandle):
    """A running ``tritonserver`` (or a command that runs a KServe v2 server, e.g. Triton in a container)."""

    stop_timeout_s = 30.0

    @classmethod
    def start(
        cls,
        repositories: Sequence[Path],
        *,
        models: Sequence[str] = (),
        binary: Path | None = None,
        extra_args: Sequence[str] = (),
        wait_timeout_s: float = 120.0,
        workdir: Path | None = None,
        log_path: Path | None = None,
        grpc_port: int = 0,
    ) -> TritonProcess:
        """Start the pytriton binary (or ``binary``) on free loopback ports (gRPC on ``grpc_port`` when
        given: a restart on the same address) and wait for ``models``."""
        workdir = workdir or Path(tempfile.mkdtemp(prefix="sonic-triton-"))
        ports = {"grpc": grpc_port or free_port(), "http": free_port(), "metrics": free_port()}
        backends = prepare_backend_directory(workdir) if binary is None else None
        command = tritonserver_command(
            repositories, ports, binary=binary, backend_directory=backends, extra_args=extra_args
        )
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (env.get("LD_LIBRARY_PATH"), str(libs_path())) if p
        )
        return cls.launch(
            command,
            f"127.0.0.1:{ports['grpc']}",
            models,
            wait_timeout_s,
            env,
            log_path or workdir / "triton.log",
        )

    @classmethod
    def launch(
        cls,
        command: Sequence[str],
        grpc_address: str,
        models: Sequence[str],
        wait_timeout_s: float,
        env: dict[str, str] | None,
        log_path: Path,
    ) -> TritonProcess:
        """Run ``command``, a KServe v2 server that will listen on ``grpc_address``; wait for it and ``models``."""

        def ready(process: subprocess.Popen[str]) -> dict[str, str]:
            wait_until_ready(grpc_address, models, wait_timeout_s, process)
            return {"grpc": grpc_address}

        process, addresses = start_process(command, log_path, ready, env=env)
        return cls(process, addresses, log_path)
