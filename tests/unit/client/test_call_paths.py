"""The common call's short paths: checked input signatures (sonic.client.plans) and SyncClient's loop
run in the calling thread. Each must answer as the full path does, errors included."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest

from sonic.client import AsyncClient, InputError, SyncClient
from sonic.client.transport.base import RequestTemplate
from sonic.client.transport.memory import MemoryServer, MemoryTransport
from sonic.protocol.types import WireRequest, WireResponse

pytestmark = pytest.mark.unit


class ThreadRecordingTransport(MemoryTransport):
    """Notes which thread each request's try ran in, and which entry point it came through."""

    def __init__(self, server: MemoryServer) -> None:
        super().__init__(server)
        self.threads: list[int] = []
        self.templated = 0

    async def infer(self, request: WireRequest) -> WireResponse:
        self.threads.append(threading.get_ident())
        return await super().infer(request)

    async def infer_template(self, template: RequestTemplate, request_id: str, data: Any) -> WireResponse:
        self.templated += 1
        return await super().infer_template(template, request_id, data)


def test_repeated_signature_takes_the_template_and_answers_the_same(servers: list[MemoryServer]) -> None:
    transport = ThreadRecordingTransport(servers[0])

    async def calls() -> list[dict[str, Any]]:
        async with AsyncClient("double", transports=[transport]) as client:
            x = np.arange(8, dtype=np.float32).reshape(2, 4)
            answers = [await client.infer({"INPUT0": x * i}) for i in range(3)]
            answers.append(await client.infer({"INPUT0": x}, ["OUTPUT1"]))
            answers.append(await client.infer({"INPUT0": x[:1]}))  # another shape: another plan
            return answers

    answers = asyncio.run(calls())
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for i in range(3):
        np.testing.assert_array_equal(answers[i]["OUTPUT0"], x * i * 2)
        np.testing.assert_array_equal(answers[i]["OUTPUT1"], x * i + 1)
    assert list(answers[3]) == ["OUTPUT1"]
    np.testing.assert_array_equal(answers[4]["OUTPUT0"], x[:1] * 2)
    # The first call fetched the metadata on the full path; the others came through templates.
    assert transport.templated == 4
    assert servers[0].batch_sizes == [2, 2, 2, 2, 1]


def test_a_known_signature_does_not_hide_bad_calls(transports: list[MemoryTransport]) -> None:
    async def calls() -> None:
        async with AsyncClient("double", transports=transports) as client:
            x = np.ones((1, 4), np.float32)
            await client.infer({"INPUT0": x})
            await client.infer({"INPUT0": x})
            with pytest.raises(InputError, match=r"numpy dtype float64 given, expected float32 \(FP32\)"):
                await client.infer({"INPUT0": x.astype(np.float64)})
            with pytest.raises(InputError, match=r"shape \[1, 5\] given, expected \[batch, 4\]"):
                await client.infer({"INPUT0": np.ones((1, 5), np.float32)})
            with pytest.raises(InputError, match=r"unknown inputs \['INPUT9'\]"):
                await client.infer({"INPUT0": x, "INPUT9": x})
            with pytest.raises(InputError, match=r"unknown outputs \['NOPE'\]"):
                await client.infer({"INPUT0": x}, ["NOPE"])
            # Twice: a refused signature is not remembered as a good one.
            with pytest.raises(InputError, match="numpy dtype float64 given"):
                await client.infer({"INPUT0": x.astype(np.float64)})
            big = np.ones((20, 4), np.float32)  # above max_batch_size 8: split, on the full path
            np.testing.assert_array_equal((await client.infer({"INPUT0": big}))["OUTPUT0"], big * 2)

    asyncio.run(calls())


def test_sync_blocking_calls_run_in_the_calling_thread_until_submit(servers: list[MemoryServer]) -> None:
    transport = ThreadRecordingTransport(servers[0])
    x = np.ones((1, 4), np.float32)
    with SyncClient("double", transports=[transport]) as client:
        for _ in range(3):
            np.testing.assert_array_equal(client.infer({"INPUT0": x})["OUTPUT0"], x * 2)
        assert transport.threads == [threading.get_ident()] * 3
        done = threading.Event()
        future = client.submit({"INPUT0": x * 3}, callback=lambda _: done.set())
        np.testing.assert_array_equal(future.result()["OUTPUT0"], x * 6)
        assert done.wait(timeout=30)
        assert transport.threads[-1] != threading.get_ident()  # the loop's own thread from now on
        np.testing.assert_array_equal(client.infer({"INPUT0": x})["OUTPUT0"], x * 2)
        assert transport.threads[-1] != threading.get_ident()


def test_sync_calls_from_many_threads_and_from_a_running_loop(transports: list[MemoryTransport]) -> None:
    with SyncClient("double", transports=transports) as client:
        results: dict[int, float] = {}

        def caller(index: int) -> None:
            for _ in range(20):
                x = np.full((1, 4), index, np.float32)
                results[index] = float(client.infer({"INPUT0": x})["OUTPUT0"].sum())

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == {i: 8.0 * i for i in range(4)}

    async def notebook_cell() -> float:  # a blocking call where an asyncio loop is already running
        with SyncClient("double", transports=transports) as inner:
            return float(inner.infer({"INPUT0": np.ones((1, 4), np.float32)})["OUTPUT0"].sum())

    assert asyncio.run(notebook_cell()) == 8.0
