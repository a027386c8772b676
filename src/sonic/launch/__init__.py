"""Launchers for inference servers, one module per kind, on one core (:mod:`sonic.launch.process`).

- :mod:`sonic.launch.serve`: ``sonic serve`` subprocesses, ready at their ready line;
- :mod:`sonic.launch.triton`: NVIDIA ``tritonserver`` (the pytriton wheel's binary or one given by path),
  and any KServe v2 server command, ready when gRPC says so;
- :mod:`sonic.launch.container`: Triton in a container (apptainer, docker, podman).

Used by the client's fallback server, the demos, the tests and the benchmarks. Every server is stopped by
its PID, SIGTERM first.
"""

from sonic.launch.process import LaunchError, ServerHandle, free_port, terminate
from sonic.launch.serve import ServerProcess, ServerStartError

__all__ = ["LaunchError", "ServerHandle", "ServerProcess", "ServerStartError", "free_port", "terminate"]
