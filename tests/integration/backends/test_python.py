"""Python backend served by ``sonic serve``: Triton Python-backend models run unchanged."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.integration

# What scale.py normalizes with.
SCALE_MEAN = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
SCALE_STD = np.linspace(0.5, 2.0, 8, dtype=np.float32)


def test_triton_add_sub_example_runs_unchanged(infer: Callable[..., dict[str, npt.NDArray[Any]]]) -> None:
    rng = np.random.default_rng(4)
    a = rng.normal(size=4).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)
    served = infer("add_sub", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(served["OUTPUT0"], a + b)
    np.testing.assert_array_equal(served["OUTPUT1"], a - b)


def test_auto_complete_config_from_model(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("scale", as_json=True)["config"]
    assert config["max_batch_size"] == 32
    assert [(i["name"], i["dims"]) for i in config["input"]] == [("RAW", ["8"])]
    assert [o["name"] for o in config["output"]] == ["SCALED", "BATCH_LIST"]
    assert "dynamic_batching" in config


def test_batch_handed_to_execute_as_list_of_requests(
    infer: Callable[..., dict[str, npt.NDArray[Any]]],
) -> None:
    """Four concurrent requests reach one execute() as a list; each gets its own response or error.

    ``scale_batched`` waits (up to 5 s) until its preferred batch of 4 requests is queued, so the
    four requests below always form one batch.
    """
    rng = np.random.default_rng(6)
    raws = [rng.normal(size=(1, 8)).astype(np.float32) for _ in range(4)]
    raws[2][0, 3] = np.nan
    results: list[object] = [None] * 4

    def send(index: int) -> None:
        try:
            results[index] = infer("scale_batched", {"RAW": raws[index]})
        except InferenceServerException as exc:
            results[index] = exc

    threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index, (raw, result) in enumerate(zip(raws, results, strict=True)):
        if index == 2:
            assert isinstance(result, InferenceServerException)
            assert result.status() == "StatusCode.INVALID_ARGUMENT"
            assert "RAW holds NaN" in result.message()
            continue
        assert isinstance(result, dict), result
        np.testing.assert_array_equal(result["SCALED"], (raw - SCALE_MEAN) / SCALE_STD)
        assert result["BATCH_LIST"].tolist() == [[4]]


def test_request_error_maps_to_status(infer: Callable[..., dict[str, npt.NDArray[Any]]]) -> None:
    raw = np.full((1, 8), np.nan, dtype=np.float32)
    with pytest.raises(InferenceServerException, match="RAW holds NaN") as error:
        infer("scale", {"RAW": raw})
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_bls_call_of_another_model(
    built_models: Any, infer: Callable[..., dict[str, npt.NDArray[Any]]]
) -> None:
    x = np.random.default_rng(5).normal(size=(3, 8)).astype(np.float32)
    served = infer("bls", {"X": x})
    with torch.inference_mode():
        expected, _ = built_models.net(torch.from_numpy(x), torch.zeros(3, 3))
    np.testing.assert_allclose(served["P"], expected.numpy(), rtol=1e-5, atol=1e-6)


def test_async_execute_with_concurrent_bls_calls(
    built_models: Any, infer: Callable[..., dict[str, npt.NDArray[Any]]]
) -> None:
    x = np.random.default_rng(7).normal(size=(2, 8)).astype(np.float32)
    served = infer("bls_async", {"X": x})
    with torch.inference_mode():
        expected, _ = built_models.net(torch.from_numpy(x), torch.zeros(2, 3))
    np.testing.assert_allclose(served["P"], expected.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(served["S"], (x - SCALE_MEAN) / SCALE_STD)


@pytest.mark.timeout(120)
def test_model_output_to_stdout_does_not_block_the_server(
    infer: Callable[..., dict[str, npt.NDArray[Any]]],
) -> None:
    """Prints after the ready line go to the server log, not the launcher's (unread) stdout pipe.

    100 requests write about 800 kB, far more than a pipe holds: with stdout left on the pipe the
    server would block in the model's print and this test would time out.
    """
    x = np.ones(2, dtype=np.float32)
    for _ in range(100):
        np.testing.assert_array_equal(infer("chatty", {"X": x})["Y"], x)
