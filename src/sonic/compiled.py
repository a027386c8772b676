"""The modules on the per-request path that the package build compiles with mypyc, and how their sources win.

The build hook (``hatch_build.py`` at the repository root, which reads :data:`COMPILED_MODULES` from this
file without importing sonic) puts one extension module beside each source, ``stream.py`` and
``stream.cpython-311-x86_64-linux-gnu.so``; Python's path finder tries extension suffixes before
``.py``, so the compiled module is what ``import sonic.h2.stream`` loads. Where no compiler was found the
wheel holds only the sources, and nothing here does anything.

The sources win instead when:

- ``SONIC_PURE_PYTHON=1`` is set (the same variable makes the build skip compiling): :func:`choose`
  puts :class:`SourceFinder` first on ``sys.meta_path``, answering for :data:`COMPILED_MODULES` only;
- an in-place (editable) build's record of the sources it compiled, :data:`SOURCES_RECORD`, no longer
  matches them (a source edited since): the same finder, and a :class:`StaleBuildWarning` naming the
  first changed module and how to rebuild. All modules or none: compiled modules call each other
  directly, so one edited source cannot be mixed with the others compiled.

:func:`choose` runs once, from ``sonic/__init__.py``; it reads the environment and, in an editable
checkout only, hashes the listed sources (about 350 kB). ``python -c "import sonic.h2.stream as s;
print(s.__file__)"`` says which mode is loaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

PURE_PYTHON_VARIABLE = "SONIC_PURE_PYTHON"
# In the package folder of an in-place build: module name -> SHA-256 of the source it was compiled from.
SOURCES_RECORD = ".compiled-sources.json"

# The per-request path (issue 37): HTTP/2, gRPC framing, the KServe gRPC codec and its vocabulary, the
# scheduler's queues and batch merge, the front end's call state; then (docs/benchmarks.md "compiling the
# data plane") the native gRPC front end, the data plane, the model version's request validation, the
# scheduler and executor, and the helpers each request passes through. Not sonic.protocol.errors: modules
# outside this list subclass its errors, and a compiled class takes no interpreted subclasses. Not
# frontends.grpc_methods: ModelStreamInfer's async generators, which mypyc does not compile.
COMPILED_MODULES = (
    "sonic.h2.aio",
    "sonic.h2.client",
    "sonic.h2.connection",
    "sonic.h2.control",
    "sonic.h2.events",
    "sonic.h2.frames",
    "sonic.h2.headers",
    "sonic.h2.lifecycle",
    "sonic.h2.limits",
    "sonic.h2.server",
    "sonic.h2.settings",
    "sonic.h2.stream",
    "sonic.h2.timers",
    "sonic.h2.windows",
    "sonic.grpc.call",
    "sonic.grpc.inflate",
    "sonic.grpc.unary",
    "sonic.protocol.dtypes",
    "sonic.protocol.grpc_codec",
    "sonic.protocol.types",
    "sonic.protocol.wire",
    "sonic.server.runtime.queues",
    "sonic.server.runtime.tensors",
    # Subclasses sonic.grpc.call.MessageReader, so it is compiled with it.
    "sonic.server.frontends.grpc_h2_call",
    "sonic.server.budget",
    "sonic.server.dataplane",
    "sonic.server.header_forward",
    "sonic.server.responses",
    "sonic.server.work",
    "sonic.server.frontends.gate",
    "sonic.server.frontends.grpc_h2",
    "sonic.server.frontends.grpc_infer",
    "sonic.server.frontends.request_windows",
    "sonic.server.metrics.stats",
    "sonic.server.models.manager",
    "sonic.server.models.version",
    "sonic.server.runtime.executor",
    "sonic.server.runtime.policy",
    "sonic.server.runtime.scheduler",
    "sonic.server.shm.request",
    "sonic.server.trace.requests",
)


class StaleBuildWarning(RuntimeWarning):
    """A compiled module is older than its source: the sources run instead, until the build is redone."""


def source_path(package_dir: Path, module: str) -> Path:
    """``sonic.h2.stream`` -> ``<package_dir>/h2/stream.py`` (``package_dir`` is the ``sonic`` folder)."""
    return package_dir.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source_digests(package_dir: Path, modules: Sequence[str] = COMPILED_MODULES) -> dict[str, str]:
    return {
        module: hashlib.sha256(source_path(package_dir, module).read_bytes()).hexdigest()
        for module in modules
    }


def changed_source(package_dir: Path) -> str | None:
    """The first compiled module whose source differs from what an in-place build recorded; None if none
    (or no record: a wheel, or no build)."""
    record = package_dir / SOURCES_RECORD
    if not record.is_file():
        return None
    built: dict[str, str] = json.loads(record.read_text())
    now = source_digests(package_dir, list(built))
    return next((module for module, digest in built.items() if now[module] != digest), None)


class SourceFinder(MetaPathFinder):
    """Finds the ``.py`` source of each compiled module, ahead of the path finder (which prefers ``.so``)."""

    def __init__(self, package_dir: Path) -> None:
        self._package_dir = package_dir
        self._modules = frozenset(COMPILED_MODULES)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        del path, target  # the file is known from the name
        if fullname not in self._modules:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(self._package_dir, fullname))


def choose(package_dir: Path) -> None:
    """Called once by ``sonic/__init__.py``: the sources win if asked to, or if the build is stale."""
    if any(isinstance(finder, SourceFinder) for finder in sys.meta_path):
        return
    if os.environ.get(PURE_PYTHON_VARIABLE) == "1":
        sys.meta_path.insert(0, SourceFinder(package_dir))
        return
    changed = changed_source(package_dir)
    if changed is not None:
        sys.meta_path.insert(0, SourceFinder(package_dir))
        warnings.warn(
            f"{changed} changed since it was compiled: running the pure-Python modules; "
            "rebuild with `./dev compile` (or set SONIC_PURE_PYTHON=1 to mean it)",
            StaleBuildWarning,
            stacklevel=2,
        )
