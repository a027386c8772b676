"""PyTorch backend served by ``sonic serve``: TorchScript and torch.export, against direct execution.

Tolerance: rtol 1e-5, atol 1e-6. Served and direct runs do the same float32 math on the same CPU,
but the batcher may merge requests, and a different batch size can change the order of the
matrix-multiply accumulations in the last bits.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
import tritonclient.grpc as grpcclient

pytestmark = pytest.mark.integration

RTOL, ATOL = 1e-5, 1e-6


def direct(
    built_models: Any, x: npt.NDArray[Any], bias: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    with torch.inference_mode():
        prob, total = built_models.net(torch.from_numpy(x), torch.from_numpy(bias))
    return prob.numpy(), total.numpy()


def test_torchscript_maps_indexed_names_by_position(
    built_models: Any, infer: Callable[..., dict[str, npt.NDArray[Any]]]
) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 8)).astype(np.float32)
    bias = rng.normal(size=(5, 3)).astype(np.float32)
    served = infer("torch_script", {"INPUT__0": x, "INPUT__1": bias})
    prob, total = direct(built_models, x, bias)
    np.testing.assert_allclose(served["OUTPUT__0"], prob, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(served["OUTPUT__1"], total, rtol=RTOL, atol=ATOL)


def test_torchscript_concurrent_requests_batched(
    built_models: Any,
    client: grpcclient.InferenceServerClient,
    infer: Callable[..., dict[str, npt.NDArray[Any]]],
) -> None:
    rng = np.random.default_rng(2)
    batches = [
        (rng.normal(size=(n, 8)).astype(np.float32), rng.normal(size=(n, 3)).astype(np.float32))
        for n in (1, 2, 3, 1, 4, 2, 1, 2)
    ]
    with ThreadPoolExecutor(8) as pool:
        served = list(
            pool.map(lambda b: infer("torch_script", {"INPUT__0": b[0], "INPUT__1": b[1]}), batches)
        )
    for (x, bias), result in zip(batches, served, strict=True):
        prob, _ = direct(built_models, x, bias)
        np.testing.assert_allclose(result["OUTPUT__0"], prob, rtol=RTOL, atol=ATOL)
    stats = client.get_inference_statistics("torch_script", as_json=True)["model_stats"][0]
    assert int(stats["inference_count"]) >= sum(len(x) for x, _ in batches)


def test_torch_export_config_completed_from_signature(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("torch_export", as_json=True)["config"]
    assert config["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("x", "TYPE_FP32", ["8"]),
        ("bias", "TYPE_FP32", ["3"]),
    ]
    assert [(o["name"], o["dims"]) for o in config["output"]] == [("OUTPUT__0", ["3"]), ("OUTPUT__1", ["1"])]
    assert "dynamic_batching" in config


def test_torch_export_matches_direct(
    built_models: Any, infer: Callable[..., dict[str, npt.NDArray[Any]]]
) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 8)).astype(np.float32)
    bias = rng.normal(size=(4, 3)).astype(np.float32)
    served = infer("torch_export", {"x": x, "bias": bias})
    prob, total = direct(built_models, x, bias)
    np.testing.assert_allclose(served["OUTPUT__0"], prob, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(served["OUTPUT__1"], total, rtol=RTOL, atol=ATOL)
