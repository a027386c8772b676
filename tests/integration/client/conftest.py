"""Real servers for client integration tests: ``sonic serve`` and NVIDIA ``tritonserver`` with the same
models (identity models in ONNX; Triton runs them through onnxruntime in its Python backend)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from sonic.launch import ServerProcess
from sonic.launch.triton import TritonProcess
from sonic.testing.repository import MODELS, write_test_repository

# Triton 2.51's gRPC front end can crash (SIGSEGV, a null context in its cancellation handling) on calls
# cancelled at microsecond deadlines: triton-inference-server/server#7368 and #8034, fixed in 24.12 by
# #7840. Reproduced here: 600 calls with 10 us deadlines killed a fresh Triton.
TRITON_CANCEL_CRASH = "Triton 2.51 crashed (SIGSEGV) on a cancelled call: its bug #7368/#8034, fixed in 24.12"


@dataclass(frozen=True)
class RunningServer:
    kind: str  # "sonic" or "triton"
    address: str
    pid: int


@pytest.fixture(scope="session")
def sonic_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_repository(tmp_path_factory.mktemp("sonic-repo"), "sonic")


@pytest.fixture(scope="session")
def triton_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_repository(tmp_path_factory.mktemp("triton-repo"), "triton")


@pytest.fixture(scope="session")
def sonic_server(sonic_repository: Path) -> Iterator[RunningServer]:
    with ServerProcess.start([sonic_repository]) as process:
        yield RunningServer("sonic", process.grpc_address, process.pid)


@pytest.fixture(scope="session")
def triton_server(
    triton_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("triton")
    with TritonProcess.start(
        [triton_repository], models=[m.name for m in MODELS], workdir=workdir
    ) as process:
        yield RunningServer("triton", process.grpc_address, process.pid)


@pytest.fixture(params=["sonic", pytest.param("triton", marks=pytest.mark.triton)])
def server(request: pytest.FixtureRequest) -> RunningServer:
    """The same test against our server and against real Triton."""
    return request.getfixturevalue(f"{request.param}_server")  # type: ignore[no-any-return]


@dataclass(frozen=True)
class CancellingServer:
    """A server for calls cancelled at microsecond deadlines; for Triton, one of its own (``triton``)."""

    server: RunningServer
    triton: TritonProcess | None

    @contextmanager
    def crash_skips(self) -> Iterator[None]:
        """A failure of the test because this Triton crashed with its known bug is a skip naming the bug;
        any other failure stays one."""
        try:
            yield
        except Exception:
            triton = self.triton
            if (
                triton is not None
                and triton.process.poll() is not None  # dead, and by the bug's signal (its log says)
                and "Signal (11)" in triton.log_path.read_text(errors="replace")
            ):
                pytest.skip(TRITON_CANCEL_CRASH)
            raise


@pytest.fixture(params=["sonic", pytest.param("triton", marks=pytest.mark.triton)])
def cancelling_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CancellingServer]:
    """Like ``server``, but each Triton test gets a Triton of its own serving ``identity`` (3-4 s to
    start): a crash of Triton 2.51 on cancelled calls (``TRITON_CANCEL_CRASH``) takes no other test's
    server with it (it once took the shared one, and the zero-copy test after it failed)."""
    if request.param == "sonic":
        yield CancellingServer(request.getfixturevalue("sonic_server"), None)
        return
    identity = tuple(m for m in MODELS if m.name == "identity")
    root = write_test_repository(tmp_path_factory.mktemp("triton-cancelled-repo"), "triton", identity)
    workdir = tmp_path_factory.mktemp("triton-cancelled")
    with TritonProcess.start([root], models=["identity"], workdir=workdir) as process:
        yield CancellingServer(RunningServer("triton", process.grpc_address, process.pid), process)
