"""Shared memory that outlives no one: a client process killed mid-run leaves no segment in /dev/shm and
no region registered with the server, and a live client's regions are left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as tritonclient

from sonic.client import ClientConfig, SharedMemoryMode, SyncClient
from sonic.launch import ServerProcess
from sonic.launch.serve import wait_for_ready_line

pytestmark = pytest.mark.integration

# A job using system shared memory; it says it is ready once its regions are registered.
CHILD = """
import sys
import numpy as np
from sonic.client import ClientConfig, SharedMemoryMode, SyncClient

config = ClientConfig(
    servers=(sys.argv[1],),
    shared_memory=SharedMemoryMode.SYSTEM,
    shm_min_bytes=0,
    handle_signals=sys.argv[2] == "1",
)
client = SyncClient("identity", config)
x = np.ones((4, 16), np.float32)
client.infer({"INPUT0": x})
print("sonic: ready child=1", flush=True)
while True:
    assert (client.infer({"INPUT0": x})["OUTPUT0"] == x).all()
"""


def segments(pid: int) -> set[str]:
    return {p.name for p in Path("/dev/shm").glob(f"sonic_{pid}_*")}


def registered(control: tritonclient.InferenceServerClient) -> set[str]:
    """The server's regions (the status call also makes it reclaim those of exited clients)."""
    return set(control.get_system_shared_memory_status().regions)


@pytest.fixture(scope="module")
def shm_server(sonic_repository: Path) -> Iterator[ServerProcess]:
    with ServerProcess.start([sonic_repository]) as server:
        yield server


@pytest.mark.parametrize(("signum", "handle_signals"), [(signal.SIGKILL, False), (signal.SIGTERM, True)])
def test_killed_client_leaves_no_shared_memory(
    shm_server: ServerProcess, signum: signal.Signals, handle_signals: bool
) -> None:
    """SIGKILL: the server reclaims the dead client's regions and unlinks them. SIGTERM with
    ``handle_signals``: the client unlinks them itself before dying."""
    config = ClientConfig(
        servers=(shm_server.grpc_address,), shared_memory=SharedMemoryMode.SYSTEM, shm_min_bytes=0
    )
    control = tritonclient.InferenceServerClient(shm_server.grpc_address)
    live = SyncClient("identity", config)  # a live client on the same server must not be disturbed
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, shm_server.grpc_address, "1" if handle_signals else "0"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        np.testing.assert_array_equal(live.infer({"INPUT0": x})["OUTPUT0"], x)
        mine = segments(os.getpid())
        wait_for_ready_line(child, 60.0)
        theirs = segments(child.pid)
        assert theirs, "the child registered no region"
        assert theirs <= registered(control)
        child.send_signal(signum)
        assert child.wait(30) == -signum
        if handle_signals:
            assert segments(child.pid) == set()  # unlinked by the client on its way out
        else:
            assert segments(child.pid) == theirs  # a SIGKILL gave it no chance: left to the server
        left = registered(control)
        assert not left & theirs, f"regions of the dead client still registered: {left & theirs}"
        assert segments(child.pid) == set()
        # The live client's regions are untouched.
        assert mine
        assert mine <= left
        assert segments(os.getpid()) == mine
        np.testing.assert_array_equal(live.infer({"INPUT0": x})["OUTPUT0"], x)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
        live.close()
        control.close()
