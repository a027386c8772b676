"""Real NVIDIA Triton 2.51 for the tests that compare sonic with it: one way to start it, shared by every module.

A parity test runs each case on both servers (:data:`SERVERS`, :func:`serving`). Triton is the ``tritonserver`` binary of the nvidia-pytriton wheel with its Python backend on CPU
(:mod:`sonic.launch.triton`: the stub for this interpreter linked into a private backend folder). Where it
cannot run (no stub for this Python), the test is skipped. It listens on free loopback ports and is ready
when gRPC says the server and every named model are; it is stopped by PID when the block or the test ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from sonic.launch import ServerProcess
from sonic.launch.process import free_port
from sonic.launch.triton import (
    TritonProcess,
    TritonStartError,
    libs_path,
    prepare_backend_directory,
    tritonserver_command,
)

READY_TIMEOUT_S = 120.0
# Flags of a server that serves models that failed to load beside the others, and says ready meanwhile:
# both servers' defaults (Triton's) stop start-up instead, or leave the server not ready.
SERVE_BROKEN_TOO = ["--exit-on-error=false", "--strict-readiness=false"]
# What a parity test's server fixture is parametrized with: Triton only where the ``triton`` marker is selected.
SERVERS = ["sonic", pytest.param("triton", marks=pytest.mark.triton)]


@dataclass(frozen=True)
class Triton:
    """A started ``tritonserver``: its process (stop it with ``with``) and where it listens."""

    process: TritonProcess
    grpc_address: str
    http_address: str


def triton_environment() -> dict[str, str]:
    """This process's environment, with the wheel's libraries and this interpreter first on PATH."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (env.get("LD_LIBRARY_PATH"), str(libs_path())) if p)
    # The Python backend stub runs the interpreter found on PATH: this one, with numpy (and sonic) installed.
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    return env


def backend_directory_or_skip(workdir: Path) -> Path:
    """The private backend folder for Triton's Python backend; the test is skipped where there is no stub."""
    try:
        return prepare_backend_directory(workdir)
    except TritonStartError as exc:
        pytest.skip(str(exc))


def start_triton(
    repositories: Sequence[Path], models: Sequence[str], extra_args: Sequence[str] = ()
) -> Triton:
    """Start Triton on ``repositories`` and wait until it and ``models`` are ready; the caller stops it.

    ``extra_args`` are Triton's own flags, after ours (the last of a repeated flag wins).
    """
    workdir = Path(tempfile.mkdtemp(prefix="sonic-triton-"))
    backends = backend_directory_or_skip(workdir)
    ports = {"grpc": free_port(), "http": free_port(), "metrics": free_port()}
    command = tritonserver_command(repositories, ports, backend_directory=backends, extra_args=extra_args)
    grpc_address = f"127.0.0.1:{ports['grpc']}"
    process = TritonProcess.launch(
        command, grpc_address, models, READY_TIMEOUT_S, triton_environment(), workdir / "triton.log"
    )
    return Triton(process, grpc_address, f"127.0.0.1:{ports['http']}")


def run_triton_to_exit(
    repositories: Sequence[Path], workdir: Path, *argv: str
) -> subprocess.CompletedProcess[str]:
    """Real Triton, run to its exit (the cases where it exits at start): its status, stdout and stderr."""
    ports = {"grpc": free_port(), "http": free_port(), "metrics": free_port()}
    backends = backend_directory_or_skip(workdir / "triton")
    command = tritonserver_command(repositories, ports, backend_directory=backends, extra_args=argv)
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=READY_TIMEOUT_S,
        check=False,
        env=triton_environment(),
    )


@contextmanager
def running_triton(
    repositories: Sequence[Path], models: Sequence[str], extra_args: Sequence[str] = ()
) -> Iterator[Triton]:
    """:func:`start_triton` for the duration of a ``with`` block."""
    triton = start_triton(repositories, models, extra_args)
    with triton.process:
        yield triton


def python_model_repository(root: Path, name: str, config: str, source: str) -> Path:
    """A repository ``root/models`` of one Python-backend model ``name`` (version 1), as both servers load it."""
    repository = root / "models"
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(config, encoding="utf-8")
    (repository / name / "1" / "model.py").write_text(source, encoding="utf-8")
    return repository


@dataclass(frozen=True)
class Endpoint:
    """Where a test's server listens."""

    kind: str  # "sonic" or "triton"
    grpc: str
    http: str = ""  # "" for a sonic started without HTTP


@contextmanager
def serving(
    kind: str,
    repository: Path,
    models: Sequence[str],
    *,
    sonic_args: Sequence[str] = (),
    triton_args: Sequence[str] = (),
    http: bool = True,
) -> Iterator[Endpoint]:
    """``sonic serve`` (``kind`` "sonic", or "sonic-grpcio" on grpcio's front end) or Triton on ``repository``.

    Triton waits for ``models``; sonic is ready at its ready line. ``sonic_args`` and ``triton_args`` are each
    server's own flags; ``http`` False starts sonic without HTTP (Triton always serves it).
    """
    if kind == "triton":
        with running_triton([repository], models, triton_args) as triton:
            yield Endpoint("triton", triton.grpc_address, triton.http_address)
        return
    args = [
        *(["--http-port", "0"] if http else []),
        *(["--grpc-server", "grpcio"] if kind == "sonic-grpcio" else []),
    ]
    with ServerProcess.start([repository], extra_args=[*args, *sonic_args]) as process:
        yield Endpoint("sonic", process.grpc_address, process.http_address if http else "")
