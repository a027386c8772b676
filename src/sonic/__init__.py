"""SONIC: Services for Optimized Network Inference on Coprocessors, in Python.

A KServe v2 / NVIDIA Triton compatible inference server (``sonic serve``), and the pieces around it.
docs/architecture.md is the map; from the bottom layer up:

- :mod:`sonic.protocol`: what both ends agree on (types, errors and the status table, codecs, model config),
  and :mod:`sonic.h2`: the HTTP/2 + gRPC-call stack that carries it (sans I/O, one asyncio adapter),
  with :mod:`sonic.grpc` above it (a unary call's answer, sans I/O);
- :mod:`sonic.launch`: start, wait for and stop server processes by PID;
- :mod:`sonic.server` and :mod:`sonic.client`: the two ends;
- :mod:`sonic.traffic`: the traffic record of ``sonic serve --traffic-log``;
- :mod:`sonic.perf` and :mod:`sonic.workflow`: load generation, and CMSSW-style event loops of users;
- :mod:`sonic.cli`, :mod:`sonic.demos`, :mod:`sonic.coffea`, :mod:`sonic.deploy`: entry points and integrations;
- :mod:`sonic.validate`: recorded traffic replayed to a reference and a candidate setup, outputs compared;
- :mod:`sonic.models`: reference models built locally; :mod:`sonic.testing`: helpers for tests only;
- :mod:`sonic.logs`: log set-up (plain text or JSON lines), shared by every command;
- :mod:`sonic.compiled`: the modules the build compiles with mypyc, and ``SONIC_PURE_PYTHON=1``, which
  makes their sources win (the one thing importing sonic does: :func:`sonic.compiled.choose`).
"""

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from sonic import compiled

# Before any compiled module is imported: their pure-Python sources win under SONIC_PURE_PYTHON=1.
compiled.choose(Path(__file__).parent)

try:
    __version__ = version("sonic-inference")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0"

__all__ = ["__version__"]
