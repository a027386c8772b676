"""Both servers, started once per module on the same model repository: real Triton 2.51 and ``sonic serve``.

Triton is the ``tritonserver`` binary in the nvidia-pytriton wheel with its Python backend on CPU;
without it the differential tests are skipped. Both run in explicit model-control mode with every
model loaded at start, so the model-control cases can load and unload the ``spare`` model.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
from tests.integration.differential.calls import Endpoint, Pair
from tests.integration.differential.repository import MODELS, write_repository

from sonic.launch import ServerProcess
from sonic.launch.process import ServerHandle, free_port

CONTROL = ["--model-control-mode=explicit", "--load-model=*"]


def _start_triton(repository: Path) -> tuple[ServerHandle, Endpoint]:
    triton = pytest.importorskip("sonic.launch.triton")
    workdir = Path(tempfile.mkdtemp(prefix="sonic-differential-"))
    backends = triton.prepare_backend_directory(workdir)
    ports = {"grpc": free_port(), "http": free_port(), "metrics": free_port()}
    command = triton.tritonserver_command([repository], ports, backend_directory=backends, extra_args=CONTROL)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (env.get("LD_LIBRARY_PATH"), str(triton.libs_path())) if p
    )
    # The Python backend stub runs the interpreter found on PATH: this one, with numpy installed.
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    grpc_address = f"127.0.0.1:{ports['grpc']}"
    names = [m.name for m in MODELS]
    handle = triton.TritonProcess.launch(command, grpc_address, names, 120.0, env, workdir / "triton.log")
    return handle, Endpoint("triton", grpc_address, f"127.0.0.1:{ports['http']}")


def _start_sonic(repository: Path) -> tuple[ServerHandle, Endpoint]:
    process = ServerProcess.start([repository], extra_args=["--http-port", "0", *CONTROL])
    return process, Endpoint("sonic", process.grpc_address, process.http_address)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """Both servers, started side by side (each start blocks on its own readiness)."""
    triton = pytest.importorskip("sonic.launch.triton")
    try:
        triton.prepare_backend_directory(Path(tempfile.mkdtemp(prefix="sonic-differential-probe-")))
    except triton.TritonStartError as exc:
        pytest.skip(str(exc))
    repository = write_repository(tmp_path_factory.mktemp("differential") / "models")
    with ExitStack() as stack, ThreadPoolExecutor(max_workers=2) as pool:
        starts = [pool.submit(start, repository) for start in (_start_triton, _start_sonic)]
        # Every server that did start is stopped, also when the other failed.
        started = []
        for future in starts:
            if future.exception() is None:
                handle, endpoint = future.result()
                stack.enter_context(handle)
                started.append(endpoint)
        for future in starts:
            future.result()  # raises the start error, after the stack holds the started ones
        yield Pair(triton=started[0], sonic=started[1])
