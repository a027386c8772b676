"""``sonic serve --traffic-log``: what a served request leaves in the record, read back as a table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess
from sonic.testing.repository import MODELS, write_test_repository
from sonic.traffic.schema import COLUMN_NAMES, read_traffic

pytestmark = pytest.mark.integration


def _input(batch: int) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("INPUT0", [batch, 16], "FP32")
    tensor.set_data_from_numpy(np.full((batch, 16), batch, dtype=np.float32))
    return tensor


def test_each_request_is_recorded_with_shapes_parameters_timing_and_status(tmp_path: Path) -> None:
    repository = write_test_repository(
        tmp_path / "models", "sonic", tuple(m for m in MODELS if m.name == "identity")
    )
    traffic = tmp_path / "traffic"
    args = ["--traffic-log", str(traffic), "--traffic-log-sample-contents-every", "2"]
    with ServerProcess.start([repository], extra_args=args) as server:
        with grpcclient.InferenceServerClient(server.grpc_address) as client:
            for batch in (1, 3, 2):
                client.infer("identity", [_input(batch)], request_id=f"b{batch}", priority=0, timeout=0)
            client.infer("identity", [_input(1)], headers=None, parameters={"custom": "x"})
            with pytest.raises(InferenceServerException):  # refused by validation: never reaches the model
                client.infer(
                    "identity",
                    [
                        grpcclient.InferInput("INPUT0", [1, 3], "FP32").set_data_from_numpy(
                            np.zeros((1, 3), np.float32)
                        )
                    ],
                )
        assert server.stop() == 0
    table = read_traffic(traffic)
    assert table.column_names == list(COLUMN_NAMES)
    rows = table.to_pylist()
    assert [row["batch_size"] for row in rows] == [1, 3, 2, 1]
    assert [row["request_id"] for row in rows[:3]] == ["b1", "b3", "b2"]
    first = rows[1]
    assert first["model"] == "identity"
    assert first["version"] == "1"
    assert first["status"] == "OK"
    assert first["input_names"] == ["INPUT0"]
    assert first["input_datatypes"] == ["FP32"]
    assert first["input_shapes"] == [[3, 16]]
    assert first["input_bytes"] == first["output_bytes"] == 3 * 16 * 4
    assert first["executed_batch_id"] >= 1
    assert first["executed_batch_size"] >= 3
    assert first["total_us"] >= first["compute_infer_us"] >= 0
    arrivals = [row["arrival_unix_ns"] for row in rows]
    assert arrivals == sorted(arrivals)
    # Every second request keeps its input bytes.
    kept = [row["contents"] for row in rows]
    assert kept[0] is None
    assert kept[2] is None
    assert np.frombuffer(kept[1][0], np.float32).tolist() == [3.0] * 48


def test_sequence_flags_and_priority_are_recorded(tmp_path: Path) -> None:
    repository = write_test_repository(
        tmp_path / "models", "sonic", tuple(m for m in MODELS if m.name == "nobatch")
    )
    traffic = tmp_path / "traffic"
    with ServerProcess.start([repository], extra_args=["--traffic-log", str(traffic)]) as server:
        with grpcclient.InferenceServerClient(server.grpc_address) as client:
            tensor = grpcclient.InferInput("INPUT0", [2, 3], "FP32")
            tensor.set_data_from_numpy(np.zeros((2, 3), np.float32))
            client.infer("nobatch", [tensor], sequence_id=7, sequence_start=True, priority=2)
        server.stop()
    (row,) = read_traffic(traffic).to_pylist()
    assert row["status"] == "OK"
    assert row["batch_size"] == 1
    assert row["sequence_id"] == "7"
    assert row["sequence_start"] is True
    assert row["sequence_end"] is False
    assert row["priority"] == 2
