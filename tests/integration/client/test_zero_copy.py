"""Zero-copy shared memory (``AsyncClient.shm_request``) against a running server."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import tritonclient.grpc as tritonclient

from sonic.client import (
    AsyncClient,
    ClientConfig,
    ClientStateError,
    InputError,
    SharedMemoryMode,
)
from sonic.client.errors import DeadlineExceededError

pytestmark = pytest.mark.integration


def _config(server: Any, **changes: Any) -> ClientConfig:
    values: dict[str, Any] = {"servers": (server.address,), "shared_memory": SharedMemoryMode.SYSTEM}
    values.update(changes)
    return ClientConfig(**values)


def _segments() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob(f"sonic_{os.getpid()}_*")}


def _server_regions(server: Any) -> dict[str, Any]:
    with tritonclient.InferenceServerClient(server.address) as client:
        return client.get_system_shared_memory_status(as_json=True).get("regions", {})  # type: ignore[no-any-return]


def test_results_equal_grpc_and_direct_inference(server: Any, sonic_repository: Path) -> None:
    before = _segments()
    rng = np.random.default_rng(7)
    batches = [rng.standard_normal((n, 48, 48, 1)).astype(np.float32) for n in (1, 33, 200)]
    session = ort.InferenceSession(
        str(sonic_repository / "identity_large" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )

    async def go() -> None:
        async with (
            AsyncClient("identity_large", _config(server)) as client,
            AsyncClient("identity_large", _config(server, shared_memory=SharedMemoryMode.OFF)) as plain,
        ):
            for x in batches:
                async with await client.shm_request({"INPUT0": x.shape}) as request:
                    view = request.inputs["INPUT0"]
                    assert view.shape == x.shape
                    assert view.dtype == np.float32
                    view[...] = x  # filled in place: the client copies nothing
                    out = (await request.infer())["OUTPUT0"]
                    assert not out.flags.writeable
                    with pytest.raises(ValueError, match="read-only"):
                        out[0, 0, 0, 0] = 1.0
                    np.testing.assert_array_equal(out, (await plain.infer({"INPUT0": x}))["OUTPUT0"])
                    np.testing.assert_array_equal(out, session.run(["OUTPUT0"], {"INPUT0": x})[0])
                    view[...] = x * 2  # the same request again, with new contents
                    np.testing.assert_array_equal((await request.infer())["OUTPUT0"], x * 2)

    asyncio.run(go())
    assert _segments() == before
    assert not _server_regions(server)


def test_views_stay_valid_until_release_then_the_region_is_reused(sonic_server: Any) -> None:
    before = _segments()
    x = np.full((64, 48, 48, 1), 3.0, np.float32)

    async def go() -> None:
        async with AsyncClient("identity_large", _config(sonic_server)) as client:
            held = await client.shm_request({"INPUT0": x.shape})
            held.inputs["INPUT0"][...] = x
            out = (await held.infer())["OUTPUT0"]
            assert len(_segments() - before) == 1
            # Copying calls meanwhile need a region of their own (smaller here): the held one is not lent.
            for value in (1.0, 2.0):
                other = np.full((8, 48, 48, 1), value, np.float32)
                np.testing.assert_array_equal((await client.infer({"INPUT0": other}))["OUTPUT0"], other)
                np.testing.assert_array_equal(out, x)
            assert len(_segments() - before) == 2
            held.release()
            held.release()  # idempotent
            assert held.released
            with pytest.raises(ClientStateError, match="was released"):
                await held.infer()
            # Released: the next request of that size gets the same region back, no new segment...
            async with await client.shm_request({"INPUT0": x.shape}) as again:
                assert len(_segments() - before) == 2
                again.inputs["INPUT0"][...] = 5.0
                await again.infer()
            # ...so a view kept past its release shows the next request's data, as the docs warn.
            assert (out == 5.0).all()

    asyncio.run(go())
    assert _segments() == before
    assert not _server_regions(sonic_server)


def test_regions_cleaned_up_after_errors_and_close(sonic_server: Any) -> None:
    before = _segments()
    x = np.ones((16, 48, 48, 1), np.float32)

    async def go() -> npt.NDArray[Any]:
        config = _config(sonic_server, timeout_s=1e-6)
        async with AsyncClient("identity_large", config) as client:
            await client.model_info()
            request = await client.shm_request({"INPUT0": x.shape})
            request.inputs["INPUT0"][...] = x
            with pytest.raises(DeadlineExceededError):
                await request.infer()
            # The server may still write into the region: it is dropped, not reused.
            assert request.released
            assert _segments() == before
            with pytest.raises(ClientStateError, match="dropped after an error"):
                await request.infer()
            request.release()  # harmless after the drop
        async with AsyncClient("identity_large", _config(sonic_server)) as client:
            kept = await client.shm_request({"INPUT0": x.shape})
            kept.inputs["INPUT0"][...] = x
            out = (await kept.infer())["OUTPUT0"]
        # Closed with the request unreleased: unregistered and unlinked, the views still readable.
        assert _segments() == before
        with pytest.raises(ClientStateError, match="closed"):
            await kept.infer()
        kept.release()
        return out

    out = asyncio.run(go())
    np.testing.assert_array_equal(out, x)
    assert not _server_regions(sonic_server)


def test_bad_usage_gets_clear_errors(sonic_server: Any) -> None:
    async def go() -> None:
        async with AsyncClient("identity_large", _config(sonic_server)) as client:
            with pytest.raises(InputError, match=r"unknown inputs \['X'\], expected \['INPUT0'\]"):
                await client.shm_request({"X": (1, 48, 48, 1)})
            with pytest.raises(
                InputError, match=r"input 'INPUT0': shape \[2, 48, 48\] given, expected \[batch, 48, 48, 1\]"
            ):
                await client.shm_request({"INPUT0": (2, 48, 48)})
            with pytest.raises(
                InputError, match="batch size 5000 given, a shared-memory request takes 1 to 2048"
            ):
                await client.shm_request({"INPUT0": (5000, 48, 48, 1)})
            with pytest.raises(InputError, match="batch size 0 given"):
                await client.shm_request({"INPUT0": (0, 48, 48, 1)})
            request = await client.shm_request({"INPUT0": (2, 48, 48, 1)})
            first = asyncio.create_task(request.infer())
            await asyncio.sleep(0)
            with pytest.raises(ClientStateError, match="has an infer\\(\\) in flight"):
                await request.infer()
            with pytest.raises(ClientStateError, match="cannot be released during infer"):
                request.release()
            await first
            request.release()
        async with AsyncClient("identity_fp16", _config(sonic_server)) as client:
            with pytest.raises(InputError, match=r"output 'OUTPUT0': FP16 \[-1\] has no size known"):
                await client.shm_request({"INPUT0": (2, 8)})
        async with AsyncClient(
            "identity", _config(sonic_server, shared_memory=SharedMemoryMode.OFF)
        ) as client:
            with pytest.raises(ClientStateError, match="shared memory is off"):
                await client.shm_request({"INPUT0": (1, 16)})

    asyncio.run(go())
