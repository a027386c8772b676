"""Ragged batching end to end: concurrent requests of different lengths, one execution, own slices."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from sonic.launch import ServerProcess
from sonic.models.ragged import write_ragged_sum

pytestmark = pytest.mark.integration

LENGTHS = (3, 4, 5)
# The batch runs once three requests are queued; the long delay only covers their arrival.
BATCHING = "dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 10000000 }\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("ragged")
    write_ragged_sum(root, "ragged_sum", BATCHING)
    write_ragged_sum(root, "ragged_alone")  # no dynamic batcher: each request runs by itself
    with ServerProcess.start([root], extra_args=["--http-port", "0"]) as process:
        yield process


def _inputs(length: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT", [1, length], "FP32")
    tensor.set_data_from_numpy(np.arange(length, dtype=np.float32).reshape(1, length) + length)
    return [tensor]


def _check(result: Any, length: int) -> None:
    values = np.arange(length, dtype=np.float32) + length
    np.testing.assert_array_equal(result.as_numpy("SUM"), [[values.sum()]])
    np.testing.assert_array_equal(result.as_numpy("COUNT"), [[length]])
    np.testing.assert_array_equal(result.as_numpy("DOUBLED"), [values * 2])


def _executions(client: grpcclient.InferenceServerClient, model: str) -> tuple[int, int]:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def test_requests_of_different_lengths_share_one_execution(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        before = _executions(client, "ragged_sum")
        answers: queue.Queue[tuple[int, Any]] = queue.Queue()
        for length in LENGTHS:
            client.async_infer(
                "ragged_sum",
                _inputs(length),
                lambda result, error, length=length: answers.put((length, error or result)),
            )
        results = dict(answers.get(timeout=60) for _ in LENGTHS)
        for length in LENGTHS:
            assert not isinstance(results[length], Exception), results[length]
            _check(results[length], length)
        after = _executions(client, "ragged_sum")
    assert (after[0] - before[0], after[1] - before[1]) == (3, 1)


def test_a_ragged_request_alone_over_http(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_address) as client:
        tensor = httpclient.InferInput("INPUT", [1, 6], "FP32")
        tensor.set_data_from_numpy(np.arange(6, dtype=np.float32).reshape(1, 6) + 6)
        _check(client.infer("ragged_alone", [tensor]), 6)
