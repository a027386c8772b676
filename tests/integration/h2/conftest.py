"""A fresh `sonic serve` per attack, a well-behaved second client, and the server's resident memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sonic.launch import ServerProcess
from sonic.models.simple import write_sample_repository
from sonic.testing.bomb import gzip_zeros
from sonic.testing.h2attacks import Bystander

MiB = 1 << 20
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


def assert_rss(process: ServerProcess, before: int, bound: int) -> None:
    grown = rss_bytes(process.pid) - before
    assert grown < bound, f"server RSS grew by {grown / MiB:.0f} MiB (bound {bound / MiB:.0f} MiB)"


@pytest.fixture(scope="session")
def small_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("h2-repository")
    write_sample_repository(root)
    return root


@pytest.fixture(scope="session")
def gzip_bomb() -> bytes:
    """1 MiB of gzip that inflates to 1 GiB of zeros."""
    return gzip_zeros(1 << 30)


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
    client = Bystander(attacked.grpc_address, CALL_BOUND_S)
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
