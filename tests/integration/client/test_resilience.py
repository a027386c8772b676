"""Client resilience against real servers that are killed and restarted, hung, drained, or lose a model.

Every scenario runs numbered requests (input i is a row of i's) and checks each was answered once with
the output of its own input. Backoffs and deadlines are short here; the defaults are documented in
:mod:`sonic.client.config`. The same scenarios run against real Triton where they apply.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as tritonclient

from sonic.client import (
    AsyncClient,
    ClientConfig,
    ClientError,
    Health,
    RetriesExhaustedError,
    SharedMemoryMode,
    TransportKind,
)
from sonic.launch import ServerHandle, ServerProcess
from sonic.launch.triton import TritonProcess

pytestmark = pytest.mark.integration

FAST: dict[str, Any] = {
    "retry_backoff_s": 0.01,
    "retry_backoff_max_s": 0.05,
    "probe_backoff_s": 0.05,
    "probe_backoff_max_s": 0.5,
    "probe_timeout_s": 0.5,
    "shared_memory": SharedMemoryMode.OFF,
}
CALLERS = 16
RECOVERY_BOUND_S = 5.0  # "a few seconds": a restarted server gets traffic again within this


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def start(kind: str, repository: Path, workdir: Path, *, grpc_port: int = 0) -> ServerHandle:
    """A server of ``kind`` with the identity model, in explicit model control mode (unload works)."""
    if kind == "sonic":
        args = ["--model-control-mode", "explicit", "--load-model", "identity"]
        return ServerProcess.start([repository], extra_args=args, grpc_port=grpc_port)
    return TritonProcess.start(
        [repository],
        models=["identity"],
        extra_args=["--model-control-mode=explicit", "--load-model=identity"],
        workdir=workdir,
        grpc_port=grpc_port,
    )


@dataclass
class Job:
    """Numbered requests; each answer is kept with the servers that gave it."""

    results: dict[int, npt.NDArray[Any]] = field(default_factory=dict)
    servers: dict[int, tuple[str, ...]] = field(default_factory=dict)
    waits: dict[int, float] = field(default_factory=dict)

    @staticmethod
    def input(i: int) -> npt.NDArray[Any]:
        return np.full((1, 16), i, np.float32)

    async def one(self, client: AsyncClient, i: int) -> tuple[str, ...]:
        start = time.monotonic()
        result = await client.infer_detailed({"INPUT0": self.input(i)})
        self.waits[i] = time.monotonic() - start
        assert i not in self.results, f"request {i} answered twice"
        self.results[i] = result.outputs["OUTPUT0"]
        self.servers[i] = result.timing.servers
        return result.timing.servers

    async def run(
        self, client: AsyncClient, numbers: range, on_answer: Callable[[int], None] | None = None
    ) -> None:
        queue = list(reversed(numbers))

        async def caller() -> None:
            while queue:
                i = queue.pop()
                await self.one(client, i)
                if on_answer is not None:
                    on_answer(i)

        async with asyncio.TaskGroup() as group:
            for _ in range(CALLERS):
                group.create_task(caller())

    def check(self, numbers: range) -> None:
        assert sorted(self.results) == list(numbers)
        for i in numbers:
            np.testing.assert_array_equal(self.results[i], self.input(i))

    async def until_served_by(self, client: AsyncClient, address: str, first: int) -> tuple[int, float]:
        """Requests one after another until ``address`` answers one (bounded); (next number, when).
        A call may fail while the client has not seen the server back yet: it is sent again."""
        deadline = time.monotonic() + RECOVERY_BOUND_S
        i = first
        while time.monotonic() < deadline:
            try:
                servers = await self.one(client, i)
            except ClientError:
                continue
            i += 1
            if address in servers:
                return i, time.monotonic()
        pytest.fail(f"{address} got no request within {RECOVERY_BOUND_S} s of being ready again")


def test_killed_server_restarted_on_its_port_gets_traffic_again(
    sonic_repository: Path, tmp_path: Path
) -> None:
    """SIGKILL one of two servers mid-job, restart it on the same port, then SIGKILL the other one:
    the job goes on on the restarted server (it was never used again before: 4,496 NoServerErrors)."""
    first = start("sonic", sonic_repository, tmp_path)
    second = start("sonic", sonic_repository, tmp_path)
    restarted: ServerHandle | None = None
    address = first.grpc_address
    config = ClientConfig(servers=(address, second.grpc_address), allowed_tries=4, **FAST)
    job = Job()

    async def scenario() -> float:
        nonlocal restarted
        async with AsyncClient("identity", config) as client:

            def kill_first(i: int) -> None:
                if len(job.results) == 50:
                    os.kill(first.pid, signal.SIGKILL)

            await job.run(client, range(200), kill_first)
            await asyncio.to_thread(first.process.wait)
            restarted = await asyncio.to_thread(
                start, "sonic", sonic_repository, tmp_path, grpc_port=port_of(address)
            )
            ready = time.monotonic()
            after, served = await job.until_served_by(client, address, 200)
            os.kill(second.pid, signal.SIGKILL)
            await job.run(client, range(after, after + 200))
            job.check(range(after + 200))
            late = {s for i in range(after, after + 200) for s in job.servers[i]}
            assert late == {address}
            assert client.statistics.failed == 0
            return served - ready

    try:
        recovery_s = asyncio.run(scenario())
    finally:
        for handle in (first, second, restarted):
            if handle is not None:
                handle.stop()
    assert recovery_s < RECOVERY_BOUND_S


@pytest.mark.parametrize(
    ("kind", "transport"),
    [
        ("sonic", TransportKind.H2),
        ("sonic", TransportKind.GRPCIO),
        pytest.param("triton", TransportKind.H2, marks=pytest.mark.triton),
    ],
)
def test_one_address_behind_a_restart(
    kind: str, transport: TransportKind, sonic_repository: Path, triton_repository: Path, tmp_path: Path
) -> None:
    """The only address (a load balancer's, say) breaks and comes back: calls while it is down fail
    fast, and calls once it is ready again succeed (one broken connection used to end the job)."""
    repository = sonic_repository if kind == "sonic" else triton_repository
    server = start(kind, repository, tmp_path)
    restarted: ServerHandle | None = None
    address = server.grpc_address
    config = ClientConfig(servers=(address,), transport=transport, **FAST)
    job = Job()

    async def scenario() -> None:
        nonlocal restarted
        async with AsyncClient("identity", config) as client:
            await job.run(client, range(100))
            os.kill(server.pid, signal.SIGKILL)
            await asyncio.to_thread(server.process.wait)
            with pytest.raises(RetriesExhaustedError, match=address):
                await client.infer({"INPUT0": Job.input(-1)})
            restarted = await asyncio.to_thread(start, kind, repository, tmp_path, grpc_port=port_of(address))
            after, _ = await job.until_served_by(client, address, 100)
            await job.run(client, range(after, after + 100))
            job.check(range(after + 100))

    try:
        asyncio.run(scenario())
    finally:
        for handle in (server, restarted):
            if handle is not None:
                handle.stop()


@pytest.fixture
def sonic_pair(sonic_repository: Path, tmp_path: Path) -> Iterator[list[ServerHandle]]:
    servers = [start("sonic", sonic_repository, tmp_path) for _ in range(2)]
    try:
        yield servers
    finally:
        for server in servers:
            os.kill(server.pid, signal.SIGCONT)  # a test that stopped it may have failed first
            server.stop()


@pytest.fixture(scope="module")
def triton_and_sonic(
    sonic_repository: Path, triton_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerHandle]]:
    """Real Triton (first) and sonic serve, both with ``identity``; tests leave them as they found them."""
    triton = start("triton", triton_repository, tmp_path_factory.mktemp("triton"))
    sonic = start("sonic", sonic_repository, tmp_path_factory.mktemp("sonic"))
    try:
        yield [triton, sonic]
    finally:
        for server in (triton, sonic):
            os.kill(server.pid, signal.SIGCONT)
            server.stop()


@pytest.fixture(params=["sonic", pytest.param("triton", marks=pytest.mark.triton)])
def pair(request: pytest.FixtureRequest) -> list[ServerHandle]:
    """Two servers with ``identity``: the first is the one the test breaks (Triton in the Triton case)."""
    name = "sonic_pair" if request.param == "sonic" else "triton_and_sonic"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def test_hung_server_stalls_each_caller_at_most_one_deadline(pair: list[ServerHandle]) -> None:
    """SIGSTOP one of two servers mid-job: calls stuck on it miss their deadline once and are answered
    by the other server; the hung server is taken out (no second stall) and comes back after SIGCONT."""
    hung, healthy = pair
    timeout_s = 1.0
    config = ClientConfig(
        servers=(hung.grpc_address, healthy.grpc_address), timeout_s=timeout_s, allowed_tries=3, **FAST
    )
    job = Job()

    async def scenario() -> None:
        async with AsyncClient("identity", config) as client:

            def stop_hung(i: int) -> None:
                if len(job.results) == 50:
                    os.kill(hung.pid, signal.SIGSTOP)

            await job.run(client, range(400), stop_hung)
            stalled = [i for i, wait in job.waits.items() if wait >= timeout_s]
            assert stalled, "the stop caught no request in flight"
            assert len(stalled) <= CALLERS, "callers met the hung server more than once"
            # One deadline, then the retry elsewhere at once: bounded by the deadline plus one retry.
            assert max(job.waits.values()) < 2 * timeout_s
            assert client.statistics.deadline_exceeded == len(stalled)
            registry = client._registry
            assert registry is not None
            entry = next(e for e in registry.entries if e.address == hung.grpc_address)
            assert entry.health in {Health.DEAD, Health.PROBING}
            os.kill(hung.pid, signal.SIGCONT)
            after, _ = await job.until_served_by(client, hung.grpc_address, 400)
            job.check(range(after))

    try:
        asyncio.run(scenario())
    finally:
        os.kill(hung.pid, signal.SIGCONT)


@pytest.mark.slow
def test_hung_server_with_default_settings(sonic_pair: list[ServerHandle]) -> None:
    """SIGSTOP with the default client settings: no caller waits longer than the documented deadline
    plus one retry (keepalive finds the hung server first: two silent intervals plus its timeout)."""
    hung, healthy = sonic_pair
    defaults = ClientConfig()
    config = ClientConfig(
        servers=(hung.grpc_address, healthy.grpc_address), shared_memory=SharedMemoryMode.OFF
    )
    job = Job()

    async def scenario() -> None:
        async with AsyncClient("identity", config) as client:

            def stop_hung(i: int) -> None:
                if len(job.results) == 50:
                    os.kill(hung.pid, signal.SIGSTOP)

            await job.run(client, range(200), stop_hung)
            job.check(range(200))
            assert defaults.timeout_s is not None
            assert defaults.keepalive_s is not None
            assert max(job.waits.values()) < defaults.timeout_s + 1.0
            assert max(job.waits.values()) < 2 * defaults.keepalive_s + defaults.keepalive_timeout_s + 1.0
            assert client.statistics.connection_lost >= 1

    try:
        asyncio.run(scenario())
    finally:
        os.kill(hung.pid, signal.SIGCONT)


def test_hung_server_found_by_keepalive_without_a_deadline(sonic_pair: list[ServerHandle]) -> None:
    """No deadline at all: HTTP/2 keepalive PINGs find the hung server, and the calls stuck on it are
    answered once by the other server. (Native transport: with grpcio, a call may also wait on grpc's
    own reconnection to the hung server, which keepalive does not cover; the deadline does.)"""
    hung, healthy = sonic_pair
    config = ClientConfig(
        servers=(hung.grpc_address, healthy.grpc_address),
        timeout_s=None,
        keepalive_s=0.3,
        keepalive_timeout_s=0.3,
        **FAST,
    )
    job = Job()

    async def scenario() -> None:
        async with AsyncClient("identity", config) as client:

            def stop_hung(i: int) -> None:
                if len(job.results) == 50:
                    os.kill(hung.pid, signal.SIGSTOP)

            await job.run(client, range(300), stop_hung)
            job.check(range(300))
            assert client.statistics.connection_lost >= 1
            assert max(job.waits.values()) < 5.0  # keepalive interval (up to twice) plus its timeout

    try:
        asyncio.run(scenario())
    finally:
        os.kill(hung.pid, signal.SIGCONT)


def test_model_unloaded_on_one_of_two_servers(pair: list[ServerHandle]) -> None:
    """Unload on one server mid-job: no NOT_FOUND reaches a caller while the other has the model; once
    neither has it the error names each server; loaded again, it is found again."""
    moved, other = pair
    config = ClientConfig(servers=(moved.grpc_address, other.grpc_address), **FAST)
    job = Job()
    moved_control = tritonclient.InferenceServerClient(moved.grpc_address)
    other_control = tritonclient.InferenceServerClient(other.grpc_address)

    async def scenario() -> None:
        async with AsyncClient("identity", config) as client:
            unloaded = asyncio.Event()

            def unload(i: int) -> None:
                if len(job.results) == 50:
                    unloaded.set()

            async def unloader() -> None:
                await unloaded.wait()
                await asyncio.to_thread(moved_control.unload_model, "identity")

            task = asyncio.create_task(unloader())
            await job.run(client, range(300), unload)
            await task
            late = {s for i in range(250, 300) for s in job.servers[i]}
            assert late == {other.grpc_address}
            await asyncio.to_thread(other_control.unload_model, "identity")
            with pytest.raises(ClientError) as info:
                await client.infer({"INPUT0": Job.input(-1)})
            assert moved.grpc_address in str(info.value)
            assert other.grpc_address in str(info.value)
            await asyncio.to_thread(moved_control.load_model, "identity")
            after, _ = await job.until_served_by(client, moved.grpc_address, 300)
            job.check(range(after))

    try:
        asyncio.run(scenario())
    finally:
        for control in (moved_control, other_control):
            control.load_model("identity")
            control.close()


def slow_reference(x: npt.NDArray[np.float32], width: int = 512, depth: int = 40) -> npt.NDArray[Any]:
    """What the ``slow`` test model computes (sonic.models.testing.slow_model)."""
    rng = np.random.default_rng(7)
    weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
    for _ in range(depth):
        x = np.tanh(x @ weight)
    return x


def test_drain_cuts_off_late_requests_and_the_client_retries_them(test_repository: Path) -> None:
    """A server stopped with a short exit timeout logs how many requests it cut off; the client sends
    them to the other server and counts them."""
    draining = ServerProcess.start([test_repository], extra_args=["--exit-timeout-secs", "0.01"])
    other = ServerProcess.start([test_repository])
    config = ClientConfig(
        servers=(draining.grpc_address, other.grpc_address), preferred_server=draining.grpc_address, **FAST
    )
    inputs = [np.random.default_rng(i).standard_normal((16, 512)).astype(np.float32) for i in range(32)]
    results: dict[int, npt.NDArray[Any]] = {}

    async def scenario() -> AsyncClient:
        async with AsyncClient("slow", config) as client:
            stopped = asyncio.Event()

            async def call(i: int) -> None:
                results[i] = (await client.infer({"INPUT0": inputs[i]}))["OUTPUT0"]
                if not stopped.is_set():
                    stopped.set()
                    draining.process.send_signal(signal.SIGTERM)

            async with asyncio.TaskGroup() as group:
                for i in range(len(inputs)):
                    group.create_task(call(i))
            return client

    try:
        client = asyncio.run(scenario())
        assert draining.process.wait(30) == 0
    finally:
        draining.stop()
        other.stop()
    for i, x in enumerate(inputs):
        np.testing.assert_allclose(results[i], slow_reference(x), rtol=1e-4, atol=1e-5)
    log = draining.log_path.read_text()
    match = re.search(r"drain: (\d+) request\(s\) still in flight", log)
    assert match is not None, log[-2000:]
    assert int(match[1]) >= 1
    assert client.statistics.drained >= 1
    assert client.statistics.failed == 0
