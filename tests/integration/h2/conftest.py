"""A fresh `sonic serve` per test, a well-behaved second client, and the server's resident memory."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess
from sonic.models.simple import write_sample_repository

T = TypeVar("T")

# A well-behaved client's call must be answered within this, attack or not (a loaded 2-core machine
# answers in milliseconds; the attacks this guards against stalled the server for 18-20 s).
CALL_BOUND_S = 3.0


def rss_bytes(pid: int) -> int:
    """The process's resident set size (VmRSS in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    msg = f"no VmRSS line for process {pid}"
    raise AssertionError(msg)


class Bystander:
    """A real tritonclient.grpc client inferring on ``identity``; it times every call."""

    def __init__(self, address: str) -> None:
        self.client = grpcclient.InferenceServerClient(address)
        self.input = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        self.input.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
        self.worst_s = 0.0
        self.calls = 0

    def call(self) -> None:
        start = time.perf_counter()
        try:
            result = self.client.infer("identity", [self.input], client_timeout=CALL_BOUND_S)
        except InferenceServerException as exc:
            msg = f"the well-behaved client's call #{self.calls + 1} failed: {exc}"
            raise AssertionError(msg) from None
        elapsed = time.perf_counter() - start
        assert result.as_numpy("OUTPUT0").tolist() == [list(range(16))]
        self.worst_s = max(self.worst_s, elapsed)
        self.calls += 1

    def during(self, attack: Callable[[], T]) -> T:
        """Run ``attack`` in a thread; call the server back to back until it is over, then once more."""
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(attack)
            while not future.done():
                self.call()
            self.call()
            result = future.result()
        assert self.worst_s < CALL_BOUND_S, f"worst call took {self.worst_s:.2f} s"
        return result

    def close(self) -> None:
        self.client.close()


@pytest.fixture(scope="session")
def small_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("h2-repository")
    write_sample_repository(root)
    return root


@pytest.fixture
def attacked(small_repository: Path) -> Iterator[ServerProcess]:
    """A server of its own for each attack (gRPC and HTTP), stopped by PID even if it is stuck."""
    process = ServerProcess.start([small_repository], extra_args=["--http-port", "0"])
    try:
        yield process
    finally:
        process.stop(timeout_s=10)


@pytest.fixture
def bystander(attacked: ServerProcess) -> Iterator[Bystander]:
    client = Bystander(attacked.grpc_address)
    client.call()  # connected and warm before the attack, and before the first RSS reading
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def h2_server(small_repository: Path) -> Iterator[ServerProcess]:
    """One server for a module of tests that each open their own connections and leave it healthy."""
    process = ServerProcess.start([small_repository])
    try:
        yield process
    finally:
        process.stop(timeout_s=10)
