"""Data API against an in-memory server: dtypes, shapes, splitting, ragged and empty batches."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from sonic.client import (
    AsyncClient,
    ClientConfig,
    ClientError,
    ClientState,
    ClientStateError,
    InputError,
    SyncClient,
)
from sonic.client.transport.memory import MemoryServer, MemoryTransport

pytestmark = pytest.mark.unit

SAMPLES: dict[str, npt.NDArray[Any]] = {
    "FP16": np.arange(6, dtype=np.float16).reshape(2, 3),
    "BF16": np.arange(6).astype(ml_dtypes.bfloat16).reshape(2, 3),
    "BOOL": np.array([[True, False, True], [False, False, True]]),
    "BYTES": np.array([[b"a", b"bc", b""], [b"\x00\xff", b"e", b"xyz"]], dtype=object),
    "INT64": np.arange(6, dtype=np.int64).reshape(2, 3),
}


T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


async def _infer(
    transports: list[MemoryTransport],
    model: str,
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | None = None,
) -> dict[str, npt.NDArray[Any]]:
    async with AsyncClient(model, transports=transports) as client:
        return await client.infer(inputs, outputs)


def test_named_outputs_and_subset(transports: list[MemoryTransport]) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = run(_infer(transports, "double", {"INPUT0": x}))
    np.testing.assert_array_equal(out["OUTPUT0"], x * 2)
    np.testing.assert_array_equal(out["OUTPUT1"], x + 1)
    subset = run(_infer(transports, "double", {"INPUT0": x}, ["OUTPUT1"]))
    assert list(subset) == ["OUTPUT1"]


@pytest.mark.parametrize("datatype", sorted(SAMPLES))
def test_datatypes_round_trip(transports: list[MemoryTransport], datatype: str) -> None:
    x = SAMPLES[datatype]
    out = run(_infer(transports, f"id_{datatype.lower()}", {"INPUT0": x}))["OUTPUT0"]
    assert out.shape == x.shape
    if datatype == "BYTES":
        assert out.tolist() == x.tolist()
    else:
        assert out.dtype == x.dtype
        np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"INPUT0": np.zeros((2, 4), np.float64)}, "float64 given, expected float32"),
        ({"INPUT0": np.zeros((2, 5), np.float32)}, "shape [2, 5] given"),
        ({"INPUT0": np.zeros((2, 4), np.float32), "EXTRA": np.zeros(1)}, "unknown inputs ['EXTRA']"),
        ({}, "missing inputs ['INPUT0']"),
    ],
)
def test_input_errors_name_model_and_input(
    transports: list[MemoryTransport],
    servers: list[MemoryServer],
    inputs: dict[str, npt.NDArray[Any]],
    message: str,
) -> None:
    with pytest.raises(InputError, match="model 'double'") as info:
        run(_infer(transports, "double", inputs))
    assert message in str(info.value)
    assert not servers[0].batch_sizes  # never sent


def test_unknown_output_is_an_input_error(transports: list[MemoryTransport]) -> None:
    with pytest.raises(InputError, match="unknown outputs"):
        run(_infer(transports, "double", {"INPUT0": np.zeros((1, 4), np.float32)}, ["NOPE"]))


def test_class_counts_are_checked_before_sending(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    async def infer(class_counts: dict[str, Any], outputs: list[str] | None = None) -> Any:
        async with AsyncClient("double", transports=transports) as client:
            return await client.infer(
                {"INPUT0": np.zeros((1, 4), np.float32)}, outputs, class_counts=class_counts
            )

    with pytest.raises(
        InputError, match="class_counts names output 'OUTPUT0', which the call does not ask for"
    ):
        run(infer({"OUTPUT0": 2}, ["OUTPUT1"]))
    for bad in (0, -3, True, 2.0):
        with pytest.raises(InputError, match=f"class count must be a positive integer, got {bad!r}"):
            run(infer({"OUTPUT0": bad}))
    assert not servers[0].batch_sizes  # never sent
    # The in-memory transport has no classification: it says so instead of answering the raw tensor.
    with pytest.raises(ClientError, match="no classification extension"):
        run(infer({"OUTPUT0": 2}))


def test_oversized_batch_is_split_and_joined(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    x = np.arange(20 * 4, dtype=np.float32).reshape(20, 4)

    async def go() -> tuple[dict[str, npt.NDArray[Any]], int]:
        async with AsyncClient("double", transports=transports) as client:
            result = await client.infer_detailed({"INPUT0": x})
            return result.outputs, result.timing.requests

    out, requests = run(go())
    np.testing.assert_array_equal(out["OUTPUT0"], x * 2)
    assert requests == 3
    assert sorted(servers[0].batch_sizes + servers[1].batch_sizes) == [4, 8, 8]


def test_empty_batch_makes_no_inference_call(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    out = run(_infer(transports, "double", {"INPUT0": np.zeros((0, 4), np.float32)}))
    assert out["OUTPUT0"].shape == (0, 4)
    assert out["OUTPUT0"].dtype == np.float32
    assert not servers[0].batch_sizes
    assert not servers[1].batch_sizes


def test_model_without_batching(transports: list[MemoryTransport]) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run(_infer(transports, "nobatch", {"INPUT0": x}))["OUTPUT0"], x)
    with pytest.raises(InputError, match="model without batching"):
        run(_infer(transports, "nobatch", {"INPUT0": x[None]}))


def test_ragged_batch_keeps_order(transports: list[MemoryTransport]) -> None:
    objects = [{"INPUT0": np.arange(n * 2, dtype=np.int64).reshape(2, n)} for n in (1, 5, 3, 7, 2)]

    async def go() -> list[dict[str, npt.NDArray[Any]]]:
        async with AsyncClient("id_int64", transports=transports) as client:
            return await client.infer_ragged(objects)

    results = run(go())
    assert len(results) == len(objects)
    for obj, result in zip(objects, results, strict=True):
        np.testing.assert_array_equal(result["OUTPUT0"], obj["INPUT0"])


def test_sync_client_blocking_and_futures(transports: list[MemoryTransport]) -> None:
    x = np.ones((2, 4), np.float32)
    seen: list[float] = []
    with SyncClient("double", transports=transports) as client:
        np.testing.assert_array_equal(client.infer({"INPUT0": x})["OUTPUT0"], x * 2)
        futures = [
            client.submit(
                {"INPUT0": x * i}, callback=lambda f: seen.append(float(f.result()["OUTPUT0"].sum()))
            )
            for i in range(10)
        ]
        totals = [f.result()["OUTPUT0"].sum() for f in futures]
    assert totals == [16.0 * i for i in range(10)]
    assert sorted(seen) == totals
    with pytest.raises(ClientStateError, match="closed"):
        client.infer({"INPUT0": x})


def test_requests_in_flight_are_bounded(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    for server in servers:
        server.hold()
    config = ClientConfig(max_in_flight=3)

    async def go() -> int:
        async with AsyncClient("double", config, transports=transports) as client:
            tasks = [
                asyncio.create_task(client.infer({"INPUT0": np.ones((1, 4), np.float32)})) for _ in range(10)
            ]
            while sum(s.in_flight for s in servers) < 3:  # noqa: ASYNC110  (wait for the held calls to arrive)
                await asyncio.sleep(0)
            held = sum(s.in_flight for s in servers)
            for server in servers:
                server.release()
            await asyncio.gather(*tasks)
            return held

    assert run(go()) == 3


def test_pickle_keeps_configuration_and_reconnects_lazily() -> None:
    config = ClientConfig(servers=("127.0.0.1:1",), timeout_s=2.5, allowed_tries=4)
    client = AsyncClient("double", config, version="2")
    copy = pickle.loads(pickle.dumps(client))
    assert (copy.model, copy.version, copy.config) == ("double", "2", config)
    assert copy.state is ClientState.NEW
    sync = SyncClient("double", config)
    try:
        sync_copy = pickle.loads(pickle.dumps(sync))
        assert sync_copy.config == config
        sync_copy.close()
    finally:
        sync.close()


def test_pickling_a_client_on_explicit_transports_is_refused(transports: list[MemoryTransport]) -> None:
    with pytest.raises(ClientStateError, match="explicit transports"):
        pickle.dumps(AsyncClient("double", transports=transports))


def test_concurrent_calls_coalesce_into_batches(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    config = ClientConfig(coalesce_in_flight=1)

    async def go() -> list[dict[str, npt.NDArray[Any]]]:
        async with AsyncClient("double", config, transports=transports[:1]) as client:
            await client.model_info()
            servers[0].hold()
            tasks = [
                asyncio.create_task(client.infer({"INPUT0": np.full((1, 4), i, np.float32)}))
                for i in range(19)
            ]
            while servers[0].in_flight == 0:  # noqa: ASYNC110  (the first call is on the wire, the rest wait)
                await asyncio.sleep(0)
            servers[0].release()
            return await asyncio.gather(*tasks)

    results = asyncio.run(go())
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result["OUTPUT0"], np.full((1, 4), 2 * i, np.float32))
    assert servers[0].batch_sizes == [1, 8, 8, 2]


def test_parameters_go_with_every_part_of_a_split_batch(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    x = np.arange(20 * 4, dtype=np.float32).reshape(20, 4)
    sent: dict[str, str | int] = {"sequence_id": "run-1", "priority": 1, "detector": "hcal"}

    async def go() -> dict[str, npt.NDArray[Any]]:
        async with AsyncClient("double", transports=transports) as client:
            return await client.infer({"INPUT0": x}, parameters=sent)

    np.testing.assert_array_equal(asyncio.run(go())["OUTPUT0"], x * 2)
    assert servers[0].parameters + servers[1].parameters == [sent] * 3


def test_calls_with_parameters_are_not_coalesced(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    config = ClientConfig(coalesce_in_flight=1)

    async def go() -> None:
        async with AsyncClient("double", config, transports=transports[:1]) as client:
            await client.model_info()
            servers[0].hold()
            tasks = [
                asyncio.create_task(
                    client.infer({"INPUT0": np.ones((1, 4), np.float32)}, parameters={"n": i})
                )
                for i in range(3)
            ]
            while servers[0].in_flight < 3:  # noqa: ASYNC110  (all three go on the wire at once)
                await asyncio.sleep(0)
            servers[0].release()
            await asyncio.gather(*tasks)

    asyncio.run(go())
    assert servers[0].batch_sizes == [1, 1, 1]
    assert sorted(str(p["n"]) for p in servers[0].parameters) == ["0", "1", "2"]


def test_parameter_of_the_wrong_type_is_an_input_error(
    transports: list[MemoryTransport], servers: list[MemoryServer]
) -> None:
    with (
        SyncClient("double", transports=transports) as client,
        pytest.raises(
            InputError,
            match="model 'double': request parameter 'sequence_start' must be a boolean, got 'yes'",
        ),
    ):
        client.infer({"INPUT0": np.ones((1, 4), np.float32)}, parameters={"sequence_start": "yes"})
    assert servers[0].batch_sizes == servers[1].batch_sizes == []
