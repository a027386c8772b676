"""The compared servers: ``sonic serve`` (native and grpcio front ends), Triton 2.51 and MLServer, each
started through :mod:`sonic.launch` and ready with every model before it joins the run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from benchmarks.compare.repositories import RAW
from benchmarks.compare.workloads import INTRA_OP_SPINNING, MODELS, THREADS
from benchmarks.harness.processes import own_libpython_for_triton
from benchmarks.harness.report import RESULTS
from sonic.launch import ServerHandle, ServerProcess, free_port
from sonic.launch.triton import TritonProcess

MLSERVER_VENV = RESULTS / "raw" / "mlserver-venv"
MLSERVER_MEMORY_CAP_BYTES = 4 << 30
NAMES = ("sonic", "sonic-grpcio", "triton", "mlserver")


def mlserver_python() -> Path:
    """MLServer's own virtualenv: its protobufs clash with tritonclient's, so it never shares ours."""
    python = MLSERVER_VENV / "bin" / "python"
    if not (MLSERVER_VENV / ".installed").exists():
        print(f"creating {MLSERVER_VENV} (mlserver, uvloop 0.21, onnxruntime)", flush=True)
        subprocess.run(
            [shutil.which("python3.11") or "python3", "-m", "venv", str(MLSERVER_VENV)], check=True
        )
        packages = ["mlserver", "uvloop==0.21.*", "onnxruntime", "numpy<2"]
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
        (MLSERVER_VENV / ".installed").touch()
    return python


def start_mlserver(repository: Path) -> TritonProcess:
    grpc_port = free_port()
    settings = {
        "host": "127.0.0.1",
        "http_port": free_port(),
        "grpc_port": grpc_port,
        "metrics_port": free_port(),
        "grpc_max_message_length": 256 * 1024 * 1024,
        "parallel_workers": 0,
        "load_models_at_startup": True,
    }
    (repository / "settings.json").write_text(json.dumps(settings, indent=2))
    python = mlserver_python()
    env = {**os.environ, "PYTHONPATH": str(repository)}
    # Its data segment is capped: on 15.6 MB tensors it grew to 7.5 GB and the kernel's OOM killer took it,
    # on a machine shared with others. Past the cap it fails by itself, and the run restarts it.
    cap = f"--data={MLSERVER_MEMORY_CAP_BYTES}"
    command = ["prlimit", cap, "--", str(python.parent / "mlserver"), "start", str(repository)]
    # TritonProcess.launch waits for ServerReady and ModelReady over KServe v2 gRPC, which MLServer speaks.
    return TritonProcess.launch(command, f"127.0.0.1:{grpc_port}", MODELS, 300.0, env, RAW / "mlserver.log")


def start_server(name: str, repositories: dict[str, Path]) -> ServerHandle:
    """Start one server and wait until it and every model are ready."""
    if name in {"sonic", "sonic-grpcio"}:
        extra = [
            "--backend-config",
            f"onnxruntime,intra_op_thread_count={THREADS}",
            "--backend-config",
            f"onnxruntime,intra_op_spinning={INTRA_OP_SPINNING}",
        ]
        if name == "sonic-grpcio":
            extra += ["--grpc-server", "grpcio"]
        log = RAW / f"{name}.log"
        # As long as Triton's: six models, ResNet's 38 MB among them, load on a shared machine.
        return ServerProcess.start(
            [repositories["sonic"]], extra_args=extra, log_path=log, wait_timeout_s=300.0
        )
    if name == "triton":
        own_libpython_for_triton()
        workdir = RAW / "triton-work"
        workdir.mkdir(parents=True, exist_ok=True)
        return TritonProcess.start(
            [repositories["triton"]], models=list(MODELS), workdir=workdir, wait_timeout_s=300.0
        )
    if name == "mlserver":
        return start_mlserver(repositories["mlserver"])
    raise ValueError(f"server {name!r}: expected one of {', '.join(NAMES)}")
