"""Batching under concurrency, queue policies, explicit load/unload, and shutdown with requests in flight."""

from __future__ import annotations

import concurrent.futures
import json
import signal
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration


def _arrived(server: ServerProcess, model: str) -> int:
    """Requests of ``model`` the server has received: queued or executing, plus finished (Prometheus)."""
    with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=10) as response:
        text = response.read().decode()
    names = (
        "nv_inference_pending_request_count",
        "nv_inference_request_success",
        "nv_inference_request_failure",
    )
    prefixes = tuple(f'{name}{{model="{model}",' for name in names)
    return sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefixes))


def _input(name: str, array: npt.NDArray[Any], datatype: str = "FP32") -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _concurrently(address: str, model: str, arrays: list[npt.NDArray[Any]]) -> list[Any]:
    """Send all arrays at once, one thread and connection each; results (or errors) in order."""

    def call(array: npt.NDArray[Any]) -> Any:
        with grpcclient.InferenceServerClient(address) as client:
            try:
                return client.infer(model, [_input("INPUT0", array)]).as_numpy("OUTPUT0")
            except InferenceServerException as exc:
                return exc

    with concurrent.futures.ThreadPoolExecutor(len(arrays)) as pool:
        return list(pool.map(call, arrays))


def test_dynamic_batching_visible_in_statistics(fresh_server: ServerProcess) -> None:
    arrays = [np.full((index % 3 + 1, 16), index, dtype=np.float32) for index in range(16)]
    results = _concurrently(fresh_server.grpc_address, "batching", arrays)
    for array, result in zip(arrays, results, strict=True):
        np.testing.assert_array_equal(result, array)  # merged and split back exactly
    with grpcclient.InferenceServerClient(fresh_server.grpc_address) as client:
        stats = client.get_inference_statistics("batching").model_stats[0]
    total = sum(a.shape[0] for a in arrays)
    assert stats.inference_stats.success.count == 16
    assert stats.inference_count == total
    assert stats.execution_count < 16  # requests were merged
    assert sum(b.batch_size * b.compute_infer.count for b in stats.batch_stats) == total
    assert stats.inference_stats.queue.ns > 0


def test_variable_dims_batch_only_when_matching(fresh_server: ServerProcess) -> None:
    arrays = [np.full((1, 4 if index % 2 else 6), index, dtype=np.float32) for index in range(8)]
    results = _concurrently(fresh_server.grpc_address, "variable_dims", arrays)
    for array, result in zip(arrays, results, strict=True):
        np.testing.assert_array_equal(result, array * 2)
    with grpcclient.InferenceServerClient(fresh_server.grpc_address) as client:
        stats = client.get_inference_statistics("variable_dims").model_stats[0]
    assert 2 <= stats.execution_count < 8  # two shapes: at least two executions, yet merged


def test_queue_full_is_unavailable(fresh_server: ServerProcess) -> None:
    arrays = [np.full((64, 512), 0.01, dtype=np.float32) for _ in range(8)]
    results = _concurrently(fresh_server.grpc_address, "queue_limited", arrays)
    errors = [r for r in results if isinstance(r, InferenceServerException)]
    assert errors, "with max_queue_size 1 and 8 concurrent slow requests some must be refused"
    assert all(e.status() == "StatusCode.UNAVAILABLE" for e in errors)
    assert "Exceeds maximum queue size" in errors[0].message()
    assert len(errors) < len(results)


def test_queue_timeout_is_unavailable(fresh_server: ServerProcess) -> None:
    arrays = [np.full((64, 512), 0.01, dtype=np.float32) for _ in range(6)]
    results = _concurrently(fresh_server.grpc_address, "timeout", arrays)
    errors = [r for r in results if isinstance(r, InferenceServerException)]
    assert errors, "requests queued behind a slow batch for more than 2 ms must time out"
    assert all(e.status() == "StatusCode.UNAVAILABLE" for e in errors)
    assert "timeout" in errors[0].message().lower()


def test_explicit_load_unload_and_config_override(explicit_server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(explicit_server.grpc_address) as client:
        assert not client.is_model_ready("identity")
        names = {m.name: m.state for m in client.get_model_repository_index().models}
        assert names["identity"] == ""  # present in the repository, never loaded
        client.load_model("identity")
        assert client.is_model_ready("identity")
        data = np.ones((2, 16), dtype=np.float32)
        np.testing.assert_array_equal(
            client.infer("identity", [_input("INPUT0", data)]).as_numpy("OUTPUT0"), data
        )
        override = {
            "backend": "onnxruntime",
            "max_batch_size": 2,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
        }
        client.load_model("identity", config=json.dumps(override))
        assert client.get_model_config("identity").config.max_batch_size == 2
        client.unload_model("identity")
        assert not client.is_model_ready("identity")
        index = {(m.name, m.version): m for m in client.get_model_repository_index().models}
        assert index[("identity", "1")].state == "UNAVAILABLE"
        assert index[("identity", "1")].reason == "unloaded"
        with pytest.raises(InferenceServerException) as info:
            client.load_model("does_not_exist")
        assert info.value.status() == "StatusCode.NOT_FOUND"
        with pytest.raises(InferenceServerException) as info:
            client.load_model("../etc")
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        with pytest.raises(InferenceServerException) as info:
            client.load_model("broken_config")
        assert "config.pbtxt:3" in info.value.message()


def test_sigterm_drains_requests_in_flight(test_repository: Path) -> None:
    """SIGTERM while slow requests are queued: all are answered, then the server exits 0."""
    server = ServerProcess.start([test_repository], extra_args=["--metrics-port", "0"])
    try:
        arrays = [np.full((64, 512), index / 100, dtype=np.float32) for index in range(8)]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(_concurrently, server.grpc_address, "slow", arrays)
            # Wait (by asking the server, not by sleeping) until every request has arrived: waiting for the
            # first execution alone let SIGTERM overtake requests still being sent on a busy machine.
            while _arrived(server, "slow") < len(arrays):
                pass
            server.process.send_signal(signal.SIGTERM)
            results = future.result(timeout=120)
        assert server.process.wait(timeout=60) == 0
    finally:
        server.stop()
    assert all(isinstance(r, np.ndarray) for r in results), [
        r for r in results if not isinstance(r, np.ndarray)
    ]
    assert all(r.shape == (64, 512) for r in results)
