"""SyncClient's blocking fast path (sonic.client.blocking) against real servers: used for the common
call, and every failure still ends as the loop's retries, failover and deadlines would have it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sonic.client import ClientConfig, SyncClient
from sonic.client.errors import RetriesExhaustedError
from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration


def _inputs(value: float) -> dict[str, npt.NDArray[Any]]:
    return {"INPUT0": np.full((1, 16), value, np.float32)}


def test_common_calls_take_the_blocking_connection(sonic_repository: Path) -> None:
    with ServerProcess.start([sonic_repository]) as server:
        config = ClientConfig(servers=(server.grpc_address,))
        with SyncClient("identity", config) as client:
            client.infer(_inputs(0))  # the first call reads the metadata (one more success) on the loop
            before = client.statistics.succeeded
            for i in range(50):
                out = client.infer(_inputs(i))
                np.testing.assert_array_equal(out["OUTPUT0"], _inputs(i)["INPUT0"])
            assert client._fast.connected == [server.grpc_address]
            assert client.statistics.succeeded == before + 50
            assert client.statistics.failed_tries == 0
        assert client._fast.connected == []  # closed with the client


def test_server_killed_between_calls_fails_over(sonic_repository: Path) -> None:
    with ServerProcess.start([sonic_repository]) as first, ServerProcess.start([sonic_repository]) as second:
        config = ClientConfig(
            servers=(first.grpc_address, second.grpc_address),
            preferred_server=first.grpc_address,
            allowed_tries=4,
            retry_backoff_s=0.01,
        )
        with SyncClient("identity", config) as client:
            client.infer(_inputs(0))  # on the loop: it reads the metadata
            client.infer(_inputs(0))
            assert client._fast.connected == [first.grpc_address]
            os.kill(first.pid, signal.SIGKILL)
            first.stop()
            for i in range(1, 20):
                out = client.infer(_inputs(i))
                np.testing.assert_array_equal(out["OUTPUT0"], _inputs(i)["INPUT0"])
            assert client.statistics.failed == 0
            # While a server is down, calls run the loop, whose task probes it back.
            assert client._fast.connected == []


def test_missed_deadline_is_a_first_try_and_retries_go_on(sonic_repository: Path) -> None:
    """A stopped server: the blocking call gives up at the deadline, the server is marked suspect and
    the retry goes to the other server, as a first try on the loop would."""
    with ServerProcess.start([sonic_repository]) as first, ServerProcess.start([sonic_repository]) as second:
        config = ClientConfig(
            servers=(first.grpc_address, second.grpc_address),
            preferred_server=first.grpc_address,
            timeout_s=0.5,
            allowed_tries=2,
            retry_backoff_s=0.01,
        )
        with SyncClient("identity", config) as client:
            client.infer(_inputs(0))
            client.infer(_inputs(0))
            assert client._fast.connected
            os.kill(first.pid, signal.SIGSTOP)
            try:
                start = time.monotonic()
                out = client.infer(_inputs(1))
                elapsed_s = time.monotonic() - start
            finally:
                os.kill(first.pid, signal.SIGCONT)
            np.testing.assert_array_equal(out["OUTPUT0"], _inputs(1)["INPUT0"])
            assert 0.5 <= elapsed_s < 1.5
            assert client.statistics.deadline_exceeded == 1
            assert client.statistics.retried == 1


def test_missed_deadline_on_the_only_server_is_the_callers_error(sonic_repository: Path) -> None:
    with ServerProcess.start([sonic_repository]) as server:
        config = ClientConfig(servers=(server.grpc_address,), timeout_s=0.5, allowed_tries=2)
        with SyncClient("identity", config) as client:
            client.infer(_inputs(0))
            client.infer(_inputs(0))
            assert client._fast.connected
            os.kill(server.pid, signal.SIGSTOP)
            try:
                start = time.monotonic()
                with pytest.raises(RetriesExhaustedError) as raised:
                    client.infer(_inputs(1))
                elapsed_s = time.monotonic() - start
            finally:
                os.kill(server.pid, signal.SIGCONT)
            # As on the loop: one deadline, then the second try waits for the suspect server's probe.
            message = str(raised.value)
            assert "try 1" in message
            assert "DEADLINE_EXCEEDED: no response within 0.5 s" in message
            assert "try 2: (no server left)" in message
            assert 0.5 <= elapsed_s < 0.5 + config.probe_timeout_s + 1.0


def test_hung_server_without_a_deadline_is_found_by_keepalive(sonic_repository: Path) -> None:
    """No deadline: the blocking call PINGs as the loop's connection would, and a server that does not
    answer is lost; the call goes on on the other server."""
    with ServerProcess.start([sonic_repository]) as first, ServerProcess.start([sonic_repository]) as second:
        config = ClientConfig(
            servers=(first.grpc_address, second.grpc_address),
            preferred_server=first.grpc_address,
            timeout_s=None,
            keepalive_s=0.3,
            keepalive_timeout_s=0.3,
            retry_backoff_s=0.01,
        )
        with SyncClient("identity", config) as client:
            client.infer(_inputs(0))
            client.infer(_inputs(0))
            assert client._fast.connected == [first.grpc_address]
            os.kill(first.pid, signal.SIGSTOP)
            try:
                start = time.monotonic()
                out = client.infer(_inputs(1))
                elapsed_s = time.monotonic() - start
            finally:
                os.kill(first.pid, signal.SIGCONT)
            np.testing.assert_array_equal(out["OUTPUT0"], _inputs(1)["INPUT0"])
            assert elapsed_s < 5.0  # keepalive interval (up to twice) plus its timeout
            assert client.statistics.connection_lost == 1
