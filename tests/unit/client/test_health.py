"""Server health against in-memory servers: dead servers probed back, preferred server, models that move."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sonic.client import AsyncClient, ClientConfig, Health, InferResult, RetriesExhaustedError
from sonic.client.health import JITTER, ProbePolicy
from sonic.client.registry import ServerEntry
from sonic.client.transport.memory import MemoryServer, MemoryTransport

pytestmark = pytest.mark.unit

FAST = ClientConfig(
    retry_backoff_s=0.001, retry_backoff_max_s=0.002, probe_backoff_s=0.01, probe_backoff_max_s=0.05
)


def _x(value: float = 1.0) -> dict[str, npt.NDArray[Any]]:
    return {"INPUT0": np.full((1, 4), value, np.float32)}


def _entry(client: AsyncClient, address: str) -> ServerEntry:
    assert client._registry is not None
    return next(e for e in client._registry.entries if e.address == address)


async def _until_health(
    client: AsyncClient, entry: ServerEntry, health: Health, timeout_s: float = 5.0
) -> None:
    """Each probe's end is an event: wait for the ones that bring ``entry`` to ``health`` (bounded)."""
    assert client._registry is not None
    async with asyncio.timeout(timeout_s):
        while entry.health is not health:
            await client._registry.prober.wait_probed(timeout_s)


def test_probe_delays_double_up_to_the_cap_with_jitter() -> None:
    policy = ProbePolicy(backoff_s=0.25, backoff_max_s=4.0)
    rng = random.Random(1)
    for failures, base in [(0, 0.25), (1, 0.5), (2, 1.0), (4, 4.0), (10, 4.0)]:
        delay = policy.delay(failures, rng)
        assert base * (1 - JITTER) <= delay <= base * (1 + JITTER)


def test_dead_server_is_probed_back_and_gets_traffic(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    async def go() -> None:
        async with AsyncClient("double", FAST, transports=transports) as client:
            await client.infer(_x())
            servers[0].kill()
            for _ in range(4):
                await client.infer(_x())  # the one to memory-0 fails over; memory-0 is taken out
            entry = _entry(client, "memory-0:1")
            assert entry.health in {Health.DEAD, Health.PROBING}
            served = len(servers[0].batch_sizes)
            servers[0].revive()
            await _until_health(client, entry, Health.HEALTHY)
            for _ in range(4):
                await client.infer(_x())
            assert len(servers[0].batch_sizes) > served
            assert client._registry is not None
        assert client._registry.prober._task is None  # the probing task ends with the client

    asyncio.run(go())


def test_every_server_down_then_one_back_within_a_call(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    """A call that finds no usable server probes the dead ones at once instead of failing."""

    async def go() -> None:
        async with AsyncClient("double", FAST, transports=transports) as client:
            await client.infer(_x())
            for server in servers:
                server.kill()
            with pytest.raises(RetriesExhaustedError, match="no server left"):
                await client.infer(_x())
            servers[1].revive()
            result = await client.infer_detailed(_x(3.0))
            np.testing.assert_array_equal(result.outputs["OUTPUT0"], _x(3.0)["INPUT0"] * 2)
            assert result.timing.servers == ("memory-1:1",)

    asyncio.run(go())


def test_preferred_server_is_chosen_while_healthy(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    config = ClientConfig(preferred_server="memory-1:1", retry_backoff_s=0.001)

    async def go() -> None:
        async with AsyncClient("double", config, transports=transports) as client:
            await asyncio.gather(*(client.infer(_x()) for _ in range(8)))

    asyncio.run(go())
    assert len(servers[1].batch_sizes) == 8
    assert servers[0].batch_sizes == []


def test_model_that_moved_is_found_on_another_server(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    async def go() -> AsyncClient:
        async with AsyncClient("double", FAST, transports=transports) as client:
            await client.infer(_x())
            del servers[0].models["double"]  # unloaded there
            for i in range(6):
                result = await client.infer_detailed(_x(i))
                np.testing.assert_array_equal(result.outputs["OUTPUT0"], _x(i)["INPUT0"] * 2)
            assert "double" not in _entry(client, "memory-0:1").models
            return client

    client = asyncio.run(go())
    assert client.statistics.model_moved <= 1  # the first call after the unload learned it
    assert client.statistics.failed == 0


def test_model_found_gone_by_a_concurrent_call_is_not_an_error(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    """A call in flight on a server whose model list another call refreshed meanwhile (the model was
    unloaded there) gets NOT_FOUND: it is retried where the model is, never raised."""
    config = ClientConfig(retry_backoff_s=0.001, retry_backoff_max_s=0.002, preferred_server="memory-0:1")

    async def go() -> InferResult:
        async with AsyncClient("double", config, transports=transports) as client:
            await client.infer(_x())
            servers[0].hold()
            call = asyncio.create_task(client.infer_detailed(_x(3)))
            await servers[0].until_in_flight(1)
            del servers[0].models["double"]  # unloaded there, and seen so by another call's refresh:
            assert client._registry is not None
            await client._registry.refresh(_entry(client, "memory-0:1"), 1.0)
            servers[0].release()
            return await call

    result = asyncio.run(go())
    np.testing.assert_array_equal(result.outputs["OUTPUT0"], _x(3)["INPUT0"] * 2)
    assert result.timing.servers == ("memory-1:1",)


def test_model_gone_everywhere_names_each_server(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    async def go() -> None:
        async with AsyncClient("double", FAST, transports=transports) as client:
            await client.infer(_x())
            for server in servers:
                del server.models["double"]
            await client.infer(_x())

    with pytest.raises(RetriesExhaustedError) as info:
        asyncio.run(go())
    text = str(info.value)
    assert "NOT_FOUND" in text
    assert "memory-0:1" in text
    assert "memory-1:1" in text
    assert "no reachable server has model 'double'" in text


def test_verbose_calls_are_summarised(
    transports: list[MemoryTransport], caplog: pytest.LogCaptureFixture
) -> None:
    config = ClientConfig(verbose=True)

    async def go() -> None:
        async with AsyncClient("double", config, transports=transports[:1]) as client:
            await client.infer(_x())

    with caplog.at_level(logging.INFO, logger="sonic.client.verbose"):
        asyncio.run(go())
    summary = [r.getMessage() for r in caplog.records if r.name == "sonic.client.verbose"]
    assert len(summary) == 1
    assert "model 'double' on memory-0:1: 1 try(s)" in summary[0]
    assert "inference count 1" in summary[0]
