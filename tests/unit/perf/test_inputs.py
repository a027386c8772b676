"""Inputs from model metadata and config: shapes, datatypes, data files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from sonic.perf.inputs import (
    check_batch_size,
    inputs_from_file,
    model_info,
    parse_shape,
    resolve_shapes,
    synthetic_inputs,
)
from sonic.perf.transport import PerfError
from sonic.protocol.grpc_codec import encode_infer_request
from sonic.protocol.wire import split_raw_contents

pytestmark = pytest.mark.unit


def _info(max_batch_size: int = 8):  # type: ignore[no-untyped-def]
    metadata = service_pb2.ModelMetadataResponse(name="m")
    lead = [-1] if max_batch_size else []
    metadata.inputs.add(name="A", datatype="FP32", shape=[*lead, 4])
    metadata.inputs.add(name="B", datatype="INT64", shape=[*lead, -1, 3])
    metadata.inputs.add(name="S", datatype="BYTES", shape=[*lead, 2])
    config = service_pb2.ModelConfigResponse()
    config.config.max_batch_size = max_batch_size
    return model_info(metadata, config)


def test_metadata_and_config_drive_the_specs() -> None:
    info = _info()
    assert [(s.name, s.datatype, s.dims) for s in info.inputs] == [
        ("A", "FP32", (4,)),
        ("B", "INT64", (-1, 3)),
        ("S", "BYTES", (2,)),
    ]
    assert _info(0).inputs[0].dims == (4,)


def test_variable_dims_need_a_shape() -> None:
    info = _info()
    with pytest.raises(PerfError, match=r"--shape B:N,3"):
        resolve_shapes(info, {})
    shapes = resolve_shapes(info, {"B": (5, 3)})
    assert shapes == {"A": (4,), "B": (5, 3), "S": (2,)}
    with pytest.raises(PerfError, match="does not match"):
        resolve_shapes(info, {"B": (5, 4)})
    with pytest.raises(PerfError, match="unknown input"):
        resolve_shapes(info, {"C": (1,)})


def test_parse_shape() -> None:
    assert parse_shape("INPUT0:3,4") == ("INPUT0", (3, 4))
    assert parse_shape("a:b:7") == ("a:b", (7,))
    for bad in ("INPUT0", "INPUT0:", "INPUT0:0", ":3"):
        with pytest.raises(PerfError):
            parse_shape(bad)


def test_batch_size_limits() -> None:
    check_batch_size(_info(8), 8)
    with pytest.raises(PerfError, match=r"1\.\.8"):
        check_batch_size(_info(8), 9)
    with pytest.raises(PerfError, match="does not batch"):
        check_batch_size(_info(0), 2)


def test_synthetic_inputs_have_the_datatypes_and_shapes() -> None:
    info = _info()
    requests = synthetic_inputs(info, {"A": (4,), "B": (5, 3), "S": (2,)}, 3, kind="random", count=4)
    assert len(requests) == 4
    first = requests[0]
    assert first["A"].dtype == np.float32
    assert first["A"].shape == (3, 4)
    assert first["B"].dtype == np.int64
    assert first["B"].shape == (3, 5, 3)
    assert first["S"].dtype == object
    assert first["S"].shape == (3, 2)
    assert not np.array_equal(requests[0]["A"], requests[1]["A"])
    zeros = synthetic_inputs(info, {"A": (4,), "B": (5, 3), "S": (2,)}, 1, kind="zero", count=4)
    assert len(zeros) == 1
    assert not zeros[0]["A"].any()


def test_encoded_request_carries_raw_tensors() -> None:
    info = _info()
    arrays = synthetic_inputs(info, {"A": (4,), "B": (2, 3), "S": (2,)}, 2, kind="random", count=1)[0]
    payload = encode_infer_request("m", "1", arrays, info.datatypes)
    rest, raw = split_raw_contents(payload)
    head = service_pb2.ModelInferRequest.FromString(rest)
    assert head.model_name == "m"
    assert head.model_version == "1"
    assert [(t.name, list(t.shape)) for t in head.inputs] == [("A", [2, 4]), ("B", [2, 2, 3]), ("S", [2, 2])]
    assert bytes(raw[0]) == arrays["A"].tobytes()


def test_json_data_file_perf_analyzer_format(tmp_path: Path) -> None:
    metadata = service_pb2.ModelMetadataResponse(name="m")
    metadata.inputs.add(name="A", datatype="FP32", shape=[-1, 2])
    config = service_pb2.ModelConfigResponse()
    config.config.max_batch_size = 4
    info = model_info(metadata, config)
    path = tmp_path / "data.json"
    path.write_text(
        json.dumps({"data": [{"A": [1, 2]}, {"A": {"content": [3, 4], "shape": [2]}}, {"A": [5, 6]}]})
    )
    requests = inputs_from_file(path, info, {"A": (2,)}, 2, count=3)
    assert requests[0]["A"].tolist() == [[1, 2], [3, 4]]
    assert requests[1]["A"].tolist() == [[5, 6], [1, 2]]  # consecutive samples, cycling
    path.write_text(json.dumps({"data": [{"B": [1, 2]}]}))
    with pytest.raises(PerfError, match="no input 'A'"):
        inputs_from_file(path, info, {"A": (2,)}, 1, count=1)


def test_npz_data_file(tmp_path: Path) -> None:
    metadata = service_pb2.ModelMetadataResponse(name="m")
    metadata.inputs.add(name="A", datatype="FP32", shape=[-1, 2])
    config = service_pb2.ModelConfigResponse()
    config.config.max_batch_size = 4
    info = model_info(metadata, config)
    path = tmp_path / "data.npz"
    np.savez(path, A=np.arange(6, dtype=np.float32).reshape(3, 2))
    requests = inputs_from_file(path, info, {"A": (2,)}, 2, count=8)
    assert len(requests) == 3
    assert requests[0]["A"].tolist() == [[0, 1], [2, 3]]
