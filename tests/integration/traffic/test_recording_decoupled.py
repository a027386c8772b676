"""A decoupled model's requests in the traffic record: one row per request, written when its stream
ends, with the number of responses it carried and their bytes."""

from __future__ import annotations

import queue
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sonic.launch import ServerProcess
from sonic.traffic.schema import read_traffic

pytestmark = pytest.mark.integration

PYTHON_MODELS = Path(__file__).parents[1] / "backends" / "python_models"
SQUARE_CONFIG = """name: "square_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
ANSWER_WAIT_S = 30.0


def test_each_decoupled_request_is_one_row_with_its_response_count(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "square_int32"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(SQUARE_CONFIG)
    shutil.copy(PYTHON_MODELS / "square_int32.py", folder / "1" / "model.py")
    traffic = tmp_path / "traffic"
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    with ServerProcess.start([tmp_path / "models"], extra_args=["--traffic-log", str(traffic)]) as server:
        with grpcclient.InferenceServerClient(server.grpc_address) as client:
            client.start_stream(callback=lambda result, error: answers.put((result, error)))
            for n in (3, 2, -1):
                tensor = grpcclient.InferInput("IN", [1], "INT32")
                tensor.set_data_from_numpy(np.array([n], np.int32))
                client.async_stream_infer("square_int32", [tensor], request_id=f"n{n}")
            got = [answers.get(timeout=ANSWER_WAIT_S) for _ in range(3 + 2 + 1)]
            client.stop_stream()
        assert server.stop() == 0
    assert sum(error is not None for _, error in got) == 1  # n = -1: the model's error
    rows = {row["request_id"]: row for row in read_traffic(traffic).to_pylist()}
    assert set(rows) == {"n3", "n2", "n-1"}
    assert (rows["n3"]["responses"], rows["n3"]["output_bytes"], rows["n3"]["status"]) == (3, 12, "OK")
    assert (rows["n2"]["responses"], rows["n2"]["output_bytes"], rows["n2"]["status"]) == (2, 8, "OK")
    assert rows["n-1"]["responses"] == 0
    assert rows["n-1"]["status"] != "OK"
    assert rows["n3"]["input_shapes"] == [[1]]
    assert rows["n3"]["total_us"] >= rows["n3"]["compute_infer_us"] >= 0
