"""Triton in a container (apptainer, docker or podman), the repositories mounted read-only.

The container shares the host's network, so Triton's gRPC port is a host port; it is started and
waited for like any KServe v2 server command (:meth:`sonic.launch.triton.TritonProcess.launch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sonic.launch.triton import TritonProcess

CONTAINER_RUNTIMES = ("apptainer", "docker", "podman")
CONTAINER_MODEL_ROOT = "/models"


def triton_container_command(
    runtime: str, image: str, repositories: Sequence[Path], grpc_port: int, *, gpu: bool, name: str
) -> list[str]:
    """The command that runs ``tritonserver`` from ``image`` with ``runtime``; ``name`` names the container."""
    if runtime not in CONTAINER_RUNTIMES:
        raise ValueError(f"container runtime '{runtime}': expected one of {', '.join(CONTAINER_RUNTIMES)}")
    mounts = [(repo, f"{CONTAINER_MODEL_ROOT}/{i}") for i, repo in enumerate(repositories)]
    triton = ["tritonserver", f"--grpc-port={grpc_port}", "--allow-http=false", "--allow-metrics=false"]
    triton += [f"--model-repository={inside}" for _, inside in mounts]
    if runtime == "apptainer":
        command = ["apptainer", "exec", "--cleanenv"]
        if gpu:
            command.append("--nv")
        for outside, inside in mounts:
            command += ["-B", f"{outside}:{inside}:ro"]
        return [*command, image, *triton]
    command = [runtime, "run", "--rm", "--name", name, "--network", "host"]
    command += ["--shm-size", "1g"]  # room for system shared-memory regions
    if gpu:
        command += ["--gpus", "all"]
    for outside, inside in mounts:
        command += ["-v", f"{outside}:{inside}:ro"]
    return [*command, image, *triton]


def start_triton_container(
    command: Sequence[str], grpc_port: int, *, wait_timeout_s: float, log_path: Path
) -> TritonProcess:
    """Run a :func:`triton_container_command` and wait until Triton answers on ``grpc_port``."""
    return TritonProcess.launch(command, f"127.0.0.1:{grpc_port}", (), wait_timeout_s, None, log_path)
