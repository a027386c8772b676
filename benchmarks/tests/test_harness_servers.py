"""A server set of the benchmark harness stops every process it holds, by PID, even when the block fails
(real processes: a Python interpreter that sleeps stands for a server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks.harness.servers import ServerSet, set_max_batch_size

from sonic.launch import ServerHandle
from sonic.protocol.model_config import parse_config_text
from sonic.testing.repository import write_test_repository

pytestmark = pytest.mark.integration


def _sleeper(tmp_path: Path) -> ServerHandle:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], text=True)
    return ServerHandle(process, {"grpc": "127.0.0.1:1"}, tmp_path / "log")


def _measure_with(servers: ServerSet, first: ServerHandle, second: ServerHandle) -> None:
    with servers:
        servers.add("first", first)
        servers.add("second", second)
        assert list(servers) == ["first", "second"]
        assert servers.addresses() == {"first": "127.0.0.1:1", "second": "127.0.0.1:1"}
        raise RuntimeError("measurement failed")


def test_server_set_stops_every_process_even_when_the_block_fails(tmp_path: Path) -> None:
    first, second, third = _sleeper(tmp_path), _sleeper(tmp_path), _sleeper(tmp_path)
    servers = ServerSet()
    with pytest.raises(RuntimeError, match="measurement failed"):
        _measure_with(servers, first, second)
    assert first.process.poll() is not None
    assert second.process.poll() is not None
    assert len(servers) == 0
    with ServerSet() as again:
        again.add("first", first)
        with pytest.raises(ValueError, match="already in the set"):
            again.add("first", third)
    assert third.process.poll() is not None  # refused, and stopped rather than left running


def test_max_batch_size_is_raised_to_fit_never_lowered(tmp_path: Path) -> None:
    write_test_repository(tmp_path, "sonic")
    set_max_batch_size(tmp_path, "identity_large", 4400)
    assert (
        parse_config_text((tmp_path / "identity_large" / "config.pbtxt").read_text(), "x").max_batch_size
        == 4400
    )
    set_max_batch_size(tmp_path, "identity_large", 100)
    assert (
        parse_config_text((tmp_path / "identity_large" / "config.pbtxt").read_text(), "x").max_batch_size
        == 4400
    )
