"""Faults with real servers: a server killed mid-job, none reachable (fallback), UNAVAILABLE for a while."""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as tritonclient

from sonic.client import (
    AsyncClient,
    ClientConfig,
    Device,
    FallbackConfig,
    FallbackServerKind,
    SharedMemoryMode,
    SyncClient,
    TransportKind,
)
from sonic.launch import ServerProcess, free_port

pytestmark = pytest.mark.integration

REQUESTS = 1000
CALLERS = 32


@pytest.mark.parametrize(
    ("shared_memory", "transport"),
    [
        (SharedMemoryMode.OFF, TransportKind.H2),
        (SharedMemoryMode.SYSTEM, TransportKind.H2),
        (SharedMemoryMode.OFF, TransportKind.GRPCIO),
    ],
)
def test_sigkill_one_of_two_servers_mid_job(
    sonic_repository: Path, shared_memory: SharedMemoryMode, transport: TransportKind
) -> None:
    with ServerProcess.start([sonic_repository]) as first, ServerProcess.start([sonic_repository]) as second:
        config = ClientConfig(
            servers=(first.grpc_address, second.grpc_address),
            allowed_tries=4,
            retry_backoff_s=0.01,
            shared_memory=shared_memory,
            shm_min_bytes=0,
            transport=transport,
        )
        before = {p.name for p in Path("/dev/shm").glob(f"sonic_{os.getpid()}_*")}
        inputs = [np.full((1, 16), i, np.float32) for i in range(REQUESTS)]
        results: dict[int, npt.NDArray[Any]] = {}
        servers_used: dict[int, tuple[str, ...]] = {}
        tries: dict[int, int] = {}

        async def job() -> None:
            queue: asyncio.Queue[int] = asyncio.Queue()
            for i in range(REQUESTS):
                queue.put_nowait(i)
            killed = asyncio.Event()

            async def caller(client: AsyncClient) -> None:
                while not queue.empty():
                    i = queue.get_nowait()
                    result = await client.infer_detailed({"INPUT0": inputs[i]})
                    assert i not in results, f"request {i} answered twice"
                    results[i] = result.outputs["OUTPUT0"]
                    servers_used[i] = result.timing.servers
                    tries[i] = result.timing.tries
                    if len(results) == REQUESTS // 5 and not killed.is_set():
                        killed.set()
                        os.kill(first.pid, signal.SIGKILL)

            async with AsyncClient("identity", config) as client:
                async with asyncio.TaskGroup() as group:
                    for _ in range(CALLERS):
                        group.create_task(caller(client))
                assert killed.is_set()

        asyncio.run(job())
        first.process.wait()
        assert {p.name for p in Path("/dev/shm").glob(f"sonic_{os.getpid()}_*")} <= before
    assert sorted(results) == list(range(REQUESTS))
    for i in range(REQUESTS):
        np.testing.assert_array_equal(results[i], inputs[i])
    assert any(t > 1 for t in tries.values()), "the kill caught no request in flight"
    late = [servers_used[i] for i in range(REQUESTS) if i >= REQUESTS // 2]
    assert {s for used in late for s in used} <= {second.grpc_address}


def test_fallback_server_when_none_is_reachable(sonic_repository: Path, tmp_path: Path) -> None:
    unreachable = f"127.0.0.1:{free_port()}"
    config = ClientConfig(
        servers=(unreachable,),
        control_timeout_s=2.0,
        fallback=FallbackConfig(
            enable=True, repositories=(sonic_repository,), device=Device.CPU, temp_dir=tmp_path
        ),
        shared_memory=SharedMemoryMode.OFF,
    )
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    client = SyncClient("identity", config)
    try:
        result = client.infer_detailed({"INPUT0": x})
        fallback = client._client._fallback.server
        assert fallback is not None
        assert fallback.pid is not None
        pid = fallback.pid
        assert result.timing.servers != (unreachable,)
        np.testing.assert_array_equal(result.outputs["OUTPUT0"], x)
    finally:
        client.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped (and reaped) at close


def test_unavailable_for_a_while_then_retries_succeed(sonic_repository: Path) -> None:
    """A named version that is not ready is UNAVAILABLE (as in Triton; without a version an unloaded model
    is NOT_FOUND, which is not retried): unload, then load again while the client retries."""
    with ServerProcess.start(
        [sonic_repository], extra_args=["--model-control-mode", "explicit", "--load-model", "identity"]
    ) as process:
        config = ClientConfig(
            servers=(process.grpc_address,),
            allowed_tries=30,
            retry_backoff_s=0.02,
            retry_backoff_max_s=0.1,
            shared_memory=SharedMemoryMode.OFF,
        )
        x = np.ones((1, 16), np.float32)

        async def job() -> int:
            failed = asyncio.Event()
            loop = asyncio.get_running_loop()

            class OnFailure(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    if "failed" in record.getMessage():
                        loop.call_soon_threadsafe(failed.set)

            handler = OnFailure(level=logging.INFO)
            logger = logging.getLogger("sonic.client.retries")
            logger.addHandler(handler)
            previous = logger.level
            logger.setLevel(logging.INFO)
            try:
                async with AsyncClient("identity", config, version="1") as client:
                    await client.infer({"INPUT0": x})  # discovered while loaded
                    control = tritonclient.InferenceServerClient(process.grpc_address)
                    await asyncio.to_thread(control.unload_model, "identity")
                    task = asyncio.create_task(client.infer_detailed({"INPUT0": x}))
                    waiter = asyncio.create_task(failed.wait())
                    # Until the server answered UNAVAILABLE at least once (or the call ended early: a bug).
                    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    assert not task.done(), task.exception()
                    await asyncio.to_thread(control.load_model, "identity")
                    control.close()
                    result = await task
                    np.testing.assert_array_equal(result.outputs["OUTPUT0"], x)
                    return result.timing.tries
            finally:
                logger.removeHandler(handler)
                logger.setLevel(previous)

        assert asyncio.run(job()) >= 2


def test_fallback_server_when_the_only_server_dies(sonic_repository: Path, tmp_path: Path) -> None:
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    with ServerProcess.start([sonic_repository]) as remote:
        config = ClientConfig(
            servers=(remote.grpc_address,),
            retry_backoff_s=0.01,
            fallback=FallbackConfig(enable=True, repositories=(sonic_repository,), temp_dir=tmp_path),
        )
        with SyncClient("identity", config) as client:
            first = client.infer_detailed({"INPUT0": x})
            assert first.timing.servers == (remote.grpc_address,)
            os.kill(remote.pid, signal.SIGKILL)
            remote.process.wait()
            second = client.infer_detailed({"INPUT0": x})
            assert second.timing.servers != (remote.grpc_address,)
            np.testing.assert_array_equal(second.outputs["OUTPUT0"], x)
            assert second.timing.tries >= 2


@pytest.mark.triton
def test_fallback_tritonserver_binary(triton_repository: Path, tmp_path: Path) -> None:
    """The fallback can be NVIDIA tritonserver (here the binary from nvidia-pytriton)."""
    config = ClientConfig(
        fallback=FallbackConfig(
            enable=True,
            repositories=(triton_repository,),
            kind=FallbackServerKind.TRITONSERVER,
            temp_dir=tmp_path,
        ),
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with SyncClient("nobatch", config) as client:
        np.testing.assert_array_equal(client.infer({"INPUT0": x})["OUTPUT0"], x)
        fallback = client._client._fallback.server
        assert fallback is not None
        pid = fallback.pid
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_client_pickled_to_a_worker_reconnects(sonic_server: object) -> None:
    address = sonic_server.address  # type: ignore[attr-defined]
    original = SyncClient("identity", ClientConfig(servers=(address,)))
    x = np.ones((1, 16), np.float32)
    try:
        original.infer({"INPUT0": x})
        copy = pickle.loads(pickle.dumps(original))  # what Dask does to ship it to a worker
    finally:
        original.close()
    with copy:
        np.testing.assert_array_equal(copy.infer({"INPUT0": x})["OUTPUT0"], x)
