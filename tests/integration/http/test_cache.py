"""Response cache: hits return identical outputs and show in statistics as Triton reports them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from sonic.launch import ServerProcess
from sonic.models.simple import IDENTITY_CONFIG, identity_model

pytestmark = pytest.mark.integration

ENSEMBLE_OF_CACHED = """
name: "ensemble_of_cached"
platform: "ensemble"
max_batch_size: 1024
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [ { model_name: "cached" model_version: -1
           input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ]
}
"""


@pytest.fixture(scope="module")
def cache_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cache-repo")
    for name, extra in (("cached", "response_cache { enable: true }\n"), ("uncached", "")):
        identity_model(root / name / "1" / "model.onnx")
        config = IDENTITY_CONFIG.replace('name: "identity"', f'name: "{name}"') + extra
        (root / name / "config.pbtxt").write_text(config)
    (root / "ensemble_of_cached" / "1").mkdir(parents=True)
    (root / "ensemble_of_cached" / "config.pbtxt").write_text(ENSEMBLE_OF_CACHED)
    return root


def _inputs(module, data: npt.NDArray[Any]) -> list[object]:  # type: ignore[no-untyped-def]
    tensor = module.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return [tensor]


def _stats(client: httpclient.InferenceServerClient, model: str) -> dict[str, Any]:
    stats: dict[str, Any] = client.get_inference_statistics(model)["model_stats"][0]
    return stats


def test_cache_hits_and_statistics(cache_repository: Path) -> None:
    args = ["--http-port", "0", "--metrics-port", "0", "--cache-size-bytes", "1000000"]
    with ServerProcess.start([cache_repository], extra_args=args) as process:
        http = httpclient.InferenceServerClient(process.http_address)
        grpc = grpcclient.InferenceServerClient(process.grpc_address)
        try:
            data = np.random.default_rng(3).random((4, 16), dtype=np.float32)
            first = grpc.infer("cached", _inputs(grpcclient, data)).as_numpy("OUTPUT0")
            again = [http.infer("cached", _inputs(httpclient, data)).as_numpy("OUTPUT0") for _ in range(2)]
            again.append(grpc.infer("cached", _inputs(grpcclient, data)).as_numpy("OUTPUT0"))
            for output in again:
                np.testing.assert_array_equal(output, first)
                assert output.tobytes() == data.tobytes()
            other = data + 1
            np.testing.assert_array_equal(
                http.infer("cached", _inputs(httpclient, other)).as_numpy("OUTPUT0"), other
            )
            stats = _stats(http, "cached")
            inference = stats["inference_stats"]
            assert inference["cache_hit"]["count"] == 3
            assert inference["cache_miss"]["count"] == 2
            assert inference["cache_hit"]["ns"] > 0
            assert inference["success"]["count"] == 5  # hits are successful requests...
            assert stats["inference_count"] == 8  # ...but not inferences or executions
            assert stats["execution_count"] == 2
            for _ in range(2):
                http.infer("uncached", _inputs(httpclient, data))
            plain = _stats(http, "uncached")["inference_stats"]
            assert plain["cache_hit"]["count"] == 0
            assert plain["cache_miss"]["count"] == 0
            assert _stats(http, "uncached")["execution_count"] == 2
        finally:
            http.close()
            grpc.close()


def test_no_cache_without_a_size(cache_repository: Path) -> None:
    with ServerProcess.start([cache_repository], extra_args=["--http-port", "0"]) as process:
        http = httpclient.InferenceServerClient(process.http_address)
        try:
            data = np.ones((1, 16), np.float32)
            for _ in range(2):
                http.infer("cached", _inputs(httpclient, data))
            stats = _stats(http, "cached")
            assert stats["execution_count"] == 2
            assert stats["inference_stats"]["cache_hit"]["count"] == 0
        finally:
            http.close()


def test_a_step_model_with_the_cache_enabled_is_answered_from_it(cache_repository: Path) -> None:
    """Triton's cache serves every request to a model that enables it, an ensemble's step calls included
    (Triton's L0_response_cache; its Triton wheel here has no cache library, so sonic only)."""
    args = ["--cache-size-bytes", "1000000"]
    with (
        ServerProcess.start([cache_repository], extra_args=args) as process,
        grpcclient.InferenceServerClient(process.grpc_address) as client,
    ):
        data = np.random.default_rng(5).random((2, 16), dtype=np.float32)
        for _ in range(3):
            tensor = grpcclient.InferInput("IN", [2, 16], "FP32")
            tensor.set_data_from_numpy(data)
            np.testing.assert_array_equal(client.infer("ensemble_of_cached", [tensor]).as_numpy("OUT"), data)
        stats = client.get_inference_statistics("cached").model_stats[0]
    assert (stats.inference_stats.cache_miss.count, stats.inference_stats.cache_hit.count) == (1, 2)
    assert stats.execution_count == 1
