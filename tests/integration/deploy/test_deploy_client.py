"""The client side of a deployment: a headless Service name stands for every replica behind it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sonic.client import AsyncClient, ClientConfig
from sonic.client.errors import NoServerError
from sonic.client.registry import resolve_host, resolve_services
from sonic.launch import ServerProcess

from .conftest import success_count

pytestmark = pytest.mark.integration
SERVICE = "sonic-replicas.sonic.svc.cluster.local"
INPUTS = {"INPUT0": np.ones((1, 16), dtype=np.float32)}


@pytest.fixture(scope="module")
def replicas(deploy_repository: Path) -> Iterator[list[ServerProcess]]:
    """Two replicas on one port, as pods behind a headless Service: 127.0.0.1:P and 127.0.0.3:P."""
    first = ServerProcess.start([deploy_repository], host="127.0.0.1")
    port = first.grpc_address.rpartition(":")[2]
    try:
        second = ServerProcess.start([deploy_repository], host="127.0.0.3", extra_args=["--grpc-port", port])
    except BaseException:
        first.stop()
        raise
    try:
        yield [first, second]
    finally:
        second.stop()
        first.stop()


async def cluster_dns(host: str, port: int) -> list[str]:
    """The cluster's DNS for the headless Service: one A record per ready pod."""
    return {SERVICE: ["127.0.0.1", "127.0.0.3"]}[host]


async def test_a_headless_service_resolves_to_every_replica_and_the_client_balances(
    replicas: list[ServerProcess],
) -> None:
    port = replicas[0].grpc_address.rpartition(":")[2]
    addresses = await resolve_services([f"{SERVICE}:{port}"], resolve=cluster_dns)
    assert addresses == [r.grpc_address for r in replicas]
    before = [success_count(r.grpc_address, "identity") for r in replicas]
    async with AsyncClient("identity", ClientConfig(servers=tuple(addresses))) as client:
        for _ in range(8):
            await client.infer(INPUTS)  # one at a time: each goes to the least busy, ties to the first
        await asyncio.gather(*(client.infer(INPUTS) for _ in range(64)))
    served = [success_count(r.grpc_address, "identity") - b for r, b in zip(replicas, before, strict=True)]
    assert sum(served) == 72
    assert min(served) > 0, f"requests per replica {served}: the client used one replica only"


async def test_services_setting_resolves_with_the_system_resolver(replicas: list[ServerProcess]) -> None:
    port = replicas[0].grpc_address.rpartition(":")[2]
    assert "127.0.0.1" in await resolve_host("localhost", int(port))
    config = ClientConfig.from_env({"SONIC_SERVICES": f"localhost:{port}"})
    assert config.services == (f"localhost:{port}",)
    async with AsyncClient("identity", config) as client:
        out = await client.infer(INPUTS)
    np.testing.assert_array_equal(out["OUTPUT0"], INPUTS["INPUT0"])


async def test_a_service_that_does_not_resolve_says_so() -> None:
    with pytest.raises(NoServerError, match=r"service 'no-such-service\.invalid:8001' does not resolve"):
        await resolve_services(["no-such-service.invalid:8001"])
    with pytest.raises(ValueError, match="expected name:port"):
        ClientConfig(services=("sonic-replicas",))
