"""The client against a running server: ours and NVIDIA Triton 2.51, same cases."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as tritonclient

from sonic.client import (
    AsyncClient,
    ClientConfig,
    Compression,
    InvalidRequestError,
    RetriesExhaustedError,
    SharedMemoryMode,
    SyncClient,
    TransportKind,
)

from .conftest import CancellingServer

pytestmark = pytest.mark.integration

# A representative subset runs on both client transports; the rest on the default (h2) one.
BOTH_TRANSPORTS = pytest.mark.parametrize("transport", list(TransportKind))


def _config(server: Any, **changes: Any) -> ClientConfig:
    values: dict[str, Any] = {"servers": (server.address,), "shared_memory": SharedMemoryMode.OFF}
    values.update(changes)
    return ClientConfig(**values)


def _direct(server: Any, model: str, x: npt.NDArray[Any], datatype: str) -> npt.NDArray[Any]:
    """The same request through tritonclient: the reference answer."""
    with tritonclient.InferenceServerClient(server.address) as client:
        tensor = tritonclient.InferInput("INPUT0", list(x.shape), datatype)
        tensor.set_data_from_numpy(x)
        result: npt.NDArray[Any] | None = client.infer(model, [tensor]).as_numpy("OUTPUT0")
        assert result is not None
        return result


@pytest.mark.parametrize(
    ("model", "datatype", "array"),
    [
        ("identity", "FP32", np.arange(3 * 16, dtype=np.float32).reshape(3, 16)),
        ("identity_fp16", "FP16", np.linspace(0, 1, 10, dtype=np.float16).reshape(2, 5)),
        ("identity_bool", "BOOL", np.array([[True, False, False, True]] * 3)),
        ("identity_int64", "INT64", np.arange(12, dtype=np.int64).reshape(2, 3, 2)),
    ],
)
@BOTH_TRANSPORTS
def test_datatypes_equal_direct_inference(
    server: Any, model: str, datatype: str, array: npt.NDArray[Any], transport: TransportKind
) -> None:
    with SyncClient(model, _config(server, transport=transport)) as client:
        out = client.infer({"INPUT0": array})["OUTPUT0"]
    expected = _direct(server, model, array, datatype)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(out, array)


def test_oversized_batch_split(server: Any) -> None:
    x = np.arange(21 * 4, dtype=np.float32).reshape(21, 4)
    with SyncClient("small_batch", _config(server)) as client:
        result = client.infer_detailed({"INPUT0": x})
    np.testing.assert_array_equal(result.outputs["OUTPUT0"], x)
    assert result.timing.requests == 3


def test_model_without_batching_and_ragged_objects(server: Any) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    objects = [{"INPUT0": np.full((1, n), n, np.float16)} for n in (3, 1, 7, 2)]
    with SyncClient("nobatch", _config(server)) as client:
        np.testing.assert_array_equal(client.infer({"INPUT0": x})["OUTPUT0"], x)
    with SyncClient("identity_fp16", _config(server)) as client:
        results = client.infer_ragged(objects)
        assert client.infer({"INPUT0": np.zeros((0, 5), np.float16)})["OUTPUT0"].shape == (0, 0)
    for obj, result in zip(objects, results, strict=True):
        np.testing.assert_array_equal(result["OUTPUT0"], obj["INPUT0"])


def test_version_selection(server: Any) -> None:
    x = np.ones((1, 16), np.float32)
    with SyncClient("identity", _config(server), version="1") as client:
        np.testing.assert_array_equal(client.infer({"INPUT0": x})["OUTPUT0"], x)
    with SyncClient("identity", _config(server), version="7") as client, pytest.raises(InvalidRequestError):
        client.infer({"INPUT0": x})


@pytest.mark.parametrize("compression", [Compression.GZIP, Compression.DEFLATE])
@BOTH_TRANSPORTS
def test_compression(server: Any, compression: Compression, transport: TransportKind) -> None:
    x = np.zeros((64, 16), np.float32)
    with SyncClient("identity", _config(server, compression=compression, transport=transport)) as client:
        np.testing.assert_array_equal(client.infer({"INPUT0": x})["OUTPUT0"], x)


def _leftover_segments() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob(f"sonic_{os.getpid()}_*")}


@BOTH_TRANSPORTS
def test_shared_memory_equals_grpc_and_cleans_up(server: Any, transport: TransportKind) -> None:
    before = _leftover_segments()
    rng = np.random.default_rng(1)
    batches = [rng.standard_normal((n, 48, 48, 1)).astype(np.float32) for n in (5, 40, 17)]

    async def go(mode: SharedMemoryMode) -> list[npt.NDArray[Any]]:
        config = _config(server, shared_memory=mode, transport=transport)
        async with AsyncClient("identity_large", config) as client:
            results = await asyncio.gather(*(client.infer({"INPUT0": b}) for b in batches))
            if mode is SharedMemoryMode.SYSTEM:
                assert _leftover_segments() - before, "shared memory was not used"
            return [r["OUTPUT0"] for r in results]

    plain = asyncio.run(go(SharedMemoryMode.OFF))
    shared = asyncio.run(go(SharedMemoryMode.SYSTEM))
    for a, b, x in zip(plain, shared, batches, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, x)
    assert _leftover_segments() == before
    with tritonclient.InferenceServerClient(server.address) as client:
        assert not client.get_system_shared_memory_status(as_json=True).get("regions")


def test_verbose_timing_has_server_breakdown(server: Any) -> None:
    x = np.ones((4, 16), np.float32)
    with SyncClient("identity", _config(server, verbose=True)) as client:
        result = client.infer_detailed({"INPUT0": x})
    timing = result.timing
    assert timing.serialize_s > 0
    assert timing.wait_s > 0
    assert timing.deserialize_s > 0
    assert timing.server is not None
    assert timing.server.success_count == 1
    assert timing.server.compute_infer_ns > 0


def test_shared_memory_regions_are_reused_and_grown(server: Any) -> None:
    before = _leftover_segments()
    sizes = (8, 40, 10, 120)

    async def go() -> None:
        async with AsyncClient(
            "identity_large", _config(server, shared_memory=SharedMemoryMode.SYSTEM)
        ) as client:
            for n in sizes:  # one at a time: the same region serves every call, grown twice
                x = np.full((n, 48, 48, 1), n, np.float32)
                np.testing.assert_array_equal((await client.infer({"INPUT0": x}))["OUTPUT0"], x)
            assert len(_leftover_segments() - before) == 1

    asyncio.run(go())
    assert _leftover_segments() == before


@BOTH_TRANSPORTS
def test_per_request_deadline_is_retried_then_reported(
    cancelling_server: CancellingServer, transport: TransportKind
) -> None:
    x = np.ones((1, 16), np.float32)
    config = _config(
        cancelling_server.server, timeout_s=1e-5, allowed_tries=2, retry_backoff_s=0.001, transport=transport
    )
    with cancelling_server.crash_skips():
        with SyncClient("identity", config) as client, pytest.raises(RetriesExhaustedError) as info:
            client.infer({"INPUT0": x})
        assert [type(a.error).__name__ for a in info.value.attempts] == ["DeadlineExceededError"] * 2
