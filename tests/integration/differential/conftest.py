"""Both servers, started once per module on the same model repository: real Triton 2.51 and ``sonic serve``.

Triton is the ``tritonserver`` binary in the nvidia-pytriton wheel with its Python backend on CPU;
without it the differential tests are skipped. Both run in explicit model-control mode with every
model loaded at start, so the model-control cases can load and unload the ``spare`` model.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
from tests.integration.differential.calls import Endpoint, Pair
from tests.integration.differential.repository import MODELS, write_repository
from tests.integration.triton_helpers import backend_directory_or_skip, start_triton

from sonic.launch import ServerProcess
from sonic.launch.process import ServerHandle

CONTROL = ["--model-control-mode=explicit", "--load-model=*"]


def _start_triton(repository: Path) -> tuple[ServerHandle, Endpoint]:
    triton = start_triton([repository], [m.name for m in MODELS], CONTROL)
    return triton.process, Endpoint("triton", triton.grpc_address, triton.http_address)


def _start_sonic(repository: Path) -> tuple[ServerHandle, Endpoint]:
    process = ServerProcess.start([repository], extra_args=["--http-port", "0", *CONTROL])
    return process, Endpoint("sonic", process.grpc_address, process.http_address)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """Both servers, started side by side (each start blocks on its own readiness)."""
    # Skipped here, in the test's thread, where Triton cannot run (the starts below run in threads).
    backend_directory_or_skip(Path(tempfile.mkdtemp(prefix="sonic-differential-probe-")))
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
