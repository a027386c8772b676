"""Retries, server selection and failover against in-memory servers."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sonic.client import (
    AsyncClient,
    ClientConfig,
    InferResult,
    InvalidRequestError,
    NoServerError,
    RetriesExhaustedError,
    SharedMemoryMode,
)
from sonic.client.health import Health
from sonic.client.registry import ServerRegistry
from sonic.client.transport.memory import CONNECTION_LOST, Failure, MemoryServer, MemoryTransport
from sonic.protocol.errors import GrpcCode

pytestmark = pytest.mark.unit

FAST = ClientConfig(retry_backoff_s=0.001, retry_backoff_max_s=0.002)


def _x(value: float = 1.0) -> dict[str, npt.NDArray[Any]]:
    return {"INPUT0": np.full((1, 4), value, np.float32)}


async def _infer_detailed(
    transports: list[MemoryTransport],
    config: ClientConfig = FAST,
    inputs: dict[str, npt.NDArray[Any]] | None = None,
) -> InferResult:
    async with AsyncClient("double", config, transports=transports) as client:
        return await client.infer_detailed(inputs or _x())


@pytest.mark.parametrize("status", [GrpcCode.UNAVAILABLE, GrpcCode.RESOURCE_EXHAUSTED, CONNECTION_LOST])
def test_transient_failures_are_retried(
    transports: list[MemoryTransport], servers: list[MemoryServer], status: GrpcCode | Failure
) -> None:
    servers[0].fail_next(1, status)
    result = asyncio.run(_infer_detailed(transports))
    np.testing.assert_array_equal(result.outputs["OUTPUT0"], _x()["INPUT0"] * 2)
    assert result.timing.tries == 2


def test_retry_goes_to_the_same_server_then_another(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    servers[0].fail_next(2)
    result = asyncio.run(_infer_detailed(transports))
    assert result.timing.tries == 3
    assert result.timing.servers == ("memory-1:1",)
    assert servers[0].failures == []
    assert len(servers[1].batch_sizes) == 1


def test_invalid_request_is_never_retried(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    servers[0].fail_next(1, GrpcCode.INVALID_ARGUMENT)
    with pytest.raises(InvalidRequestError, match="INVALID_ARGUMENT"):
        asyncio.run(_infer_detailed(transports))
    assert not servers[0].batch_sizes
    assert not servers[1].batch_sizes


def test_exhausted_tries_list_every_attempt(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    for server in servers:
        server.fail_next(5)
    config = ClientConfig(allowed_tries=4, retry_backoff_s=0.001)
    with pytest.raises(RetriesExhaustedError) as info:
        asyncio.run(_infer_detailed(transports, config))
    assert [a.server for a in info.value.attempts] == ["memory-0:1", "memory-0:1", "memory-1:1", "memory-1:1"]
    assert "all 4 tries failed" in str(info.value)
    assert "try 3: memory-1:1: memory-1:1: UNAVAILABLE: injected failure" in str(info.value)


def test_least_outstanding_server_is_chosen(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    servers[0].hold()

    async def go() -> None:
        async with AsyncClient("double", FAST, transports=transports) as client:
            slow = asyncio.create_task(client.infer(_x()))
            while servers[0].in_flight == 0:  # noqa: ASYNC110  (wait until the held call arrived)
                await asyncio.sleep(0)
            for _ in range(5):
                await client.infer(_x())  # memory-0 has one outstanding: all go to memory-1
            servers[0].release()
            await slow

    asyncio.run(go())
    assert len(servers[0].batch_sizes) == 1
    assert len(servers[1].batch_sizes) == 5


def test_first_choice_is_what_select_picks_or_defers_to_it() -> None:
    """The sync pick of every call's first try agrees with select() in every state of three servers:
    health, preferred flag, requests in flight, whether each has the model."""
    transports = [MemoryTransport(MemoryServer(f"memory-{i}:1", {})) for i in range(3)]
    registry = ServerRegistry(transports, control_timeout_s=1.0, preferred_server="memory-1:1")
    states = [(h, n, has) for h in Health for n in (0, 1) for has in (True, False)]
    picked = deferred = 0

    async def check() -> None:
        nonlocal picked, deferred
        for combination in itertools.product(states, repeat=len(registry.entries)):
            for entry, (health, outstanding, has) in zip(registry.entries, combination, strict=True):
                entry.health, entry.outstanding = health, outstanding
                entry.models = {"double"} if has else set()
            candidates = [e for e in registry.entries if e.healthy and "double" in e.models]
            chosen = registry.first_choice("double")
            if chosen is None:
                deferred += 1
                assert not candidates or any(e.health is Health.SUSPECT for e in candidates)
            else:
                picked += 1
                assert chosen is await registry.select("double", set())

    asyncio.run(check())
    assert picked
    assert deferred


def test_server_dying_mid_job_requests_answered_once_elsewhere(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    servers[0].hold()

    async def go() -> list[npt.NDArray[Any]]:
        async with AsyncClient("double", FAST, transports=transports) as client:
            tasks = [asyncio.create_task(client.infer(_x(i))) for i in range(40)]
            # Every request is either answered by memory-1 or held in flight on memory-0.
            while servers[0].in_flight + len(servers[1].batch_sizes) < 40:  # noqa: ASYNC110
                await asyncio.sleep(0)
            assert servers[0].in_flight > 0
            servers[0].kill()
            results = await asyncio.gather(*tasks)
            return [r["OUTPUT0"] for r in results]

    outputs = asyncio.run(go())
    for i, output in enumerate(outputs):
        np.testing.assert_array_equal(output, np.full((1, 4), 2.0 * i, np.float32))
    assert servers[0].batch_sizes == []
    assert len(servers[1].request_ids) == 40 == len(set(servers[1].request_ids))  # none lost or duplicated


def test_unreachable_server_is_skipped_with_a_warning(
    transports: list[MemoryTransport], servers: list[MemoryServer], caplog: pytest.LogCaptureFixture
) -> None:
    servers[0].kill()
    with caplog.at_level(logging.WARNING, logger="sonic.client.registry"):
        result = asyncio.run(_infer_detailed(transports))
    assert result.timing.servers == ("memory-1:1",)
    assert "memory-0:1 skipped" in caplog.text


def test_no_server_with_the_model(transports: list[MemoryTransport]) -> None:
    async def go() -> None:
        async with AsyncClient("absent", FAST, transports=transports) as client:
            await client.infer(_x())

    with pytest.raises(NoServerError, match="no reachable server has model 'absent'"):
        asyncio.run(go())


def test_all_servers_dead_mid_job(transports: list[MemoryTransport], servers: list[MemoryServer]) -> None:
    async def go() -> None:
        async with AsyncClient("double", FAST, transports=transports) as client:
            await client.infer(_x())
            for server in servers:
                server.kill()
            await client.infer(_x())

    with pytest.raises(RetriesExhaustedError, match="no server left"):
        asyncio.run(go())


def test_shared_memory_refused_falls_back_to_plain_requests(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    transports[0].is_local = True  # the client tries shared memory; the in-memory server refuses it
    before = set(Path("/dev/shm").glob(f"sonic_{os.getpid()}_*"))
    config = ClientConfig(shared_memory=SharedMemoryMode.SYSTEM)
    result = asyncio.run(_infer_detailed(transports[:1], config))
    np.testing.assert_array_equal(result.outputs["OUTPUT0"], _x()["INPUT0"] * 2)
    assert set(Path("/dev/shm").glob(f"sonic_{os.getpid()}_*")) == before
