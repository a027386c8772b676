"""Triton's classification extension (``sonic.server.classification.top_k``) and its request parameters in both codecs."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2, service_pb2

from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError, ModelConfigError
from sonic.protocol.grpc_codec import decode_infer_request as decode_grpc
from sonic.protocol.grpc_codec import encode_request
from sonic.protocol.http_json import decode_infer_request as decode_http
from sonic.protocol.types import InferResponse, OutputTensor, WireOutputRequest, WireRequest
from sonic.server.classification.order import StdSort
from sonic.server.classification.top_k import OFF_LOOP_ELEMENTS, classify, classify_off_loop, read_labels
from sonic.server.models.paths import ModelFiles

pytestmark = pytest.mark.unit


def _classes(array: Any, count: int, batched: bool = True, labels: tuple[bytes, ...] = ()) -> Any:
    array = np.asarray(array)
    datatype = dtypes.from_numpy(array.dtype).name
    response = InferResponse("m", "1", "r", [OutputTensor("Y", datatype, array.shape, array)])
    out = classify(response, {"Y": count}, batched, {"Y": labels})
    assert response.outputs[0].array is array  # the given response (maybe the cache's) is not changed
    tensor = out.outputs[0]
    assert tensor.datatype == "BYTES"
    assert tensor.array.shape == tensor.shape
    return (
        [[b.decode() for b in row] for row in tensor.array]
        if tensor.array.ndim == 2
        else [b.decode() for b in tensor.array]
    )


def test_top_k_per_row_printed_as_std_to_string() -> None:
    scores = np.array([[0.1, 0.5, 3.0], [1e20, -0.0, 123456.789]], np.float32)
    assert _classes(scores, 2, labels=(b"a", b"", b"c:d")) == [
        ["3.000000:2:c:d", "0.500000:1"],
        ["100000002004087734272.000000:0:a", "123456.789062:2:c:d"],
    ]


def test_integers_unsigned_and_count_past_the_row() -> None:
    assert _classes(np.array([[3, -7, 9]], np.int32), 5) == [["9:2", "3:0", "-7:1"]]
    big = np.array([[2**64 - 1, 0]], np.uint64)
    assert _classes(big, 1) == [["18446744073709551615:0"]]


def test_equal_values_in_the_order_of_tritons_std_sort() -> None:
    # Answers of Triton 2.51 (probed): a short row is insertion-sorted (equal values by index), a longer
    # one goes through introsort's partitions first.
    assert _classes(np.array([[1, 0, 1, 1, 0, 1]], np.float32), 6) == [
        ["1.000000:0", "1.000000:2", "1.000000:3", "1.000000:5", "0.000000:1", "0.000000:4"]
    ]
    ties = np.ones((1, 26), np.float32)
    ties[0, 20] = 2.0
    order = [20, 13, 25, 24, 23, 22, 21, 19, 18, 17, 16, 15, 14, 0, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1]
    assert _classes(ties, 26) == [[f"{2.0 if i == 20 else 1.0:f}:{i}" for i in order]]
    weird = np.array([[1e20, -0.0, np.nan, np.inf, -np.inf, 1e-7, 123456.789]], np.float32)
    assert [text.split(":")[1] for text in _classes(weird, 7)[0]] == ["3", "0", "1", "2", "6", "5", "4"]


def test_std_sort_replay_sorts_whatever_it_is_given() -> None:
    rng = np.random.default_rng(7)
    for size in (17, 40, 300):
        values = rng.integers(0, 5, size).tolist()
        order = StdSort(values).indices()
        assert sorted(order) == list(range(size))
        assert [values[i] for i in order] == sorted(values, reverse=True)
    # Many equal values in a long row: each row replayed, the values in order, each index once.
    counts = np.tile(np.array([3, 1, 3, 2], np.int32), (2, 10))
    for row in _classes(counts, 22):
        assert [text.split(":")[0] for text in row] == ["3"] * 20 + ["2"] * 2
        assert len({text.split(":")[1] for text in row}) == 22


def test_rows_are_flattened() -> None:
    grid = np.arange(6, dtype=np.float64).reshape(1, 3, 2)
    assert _classes(grid, 2) == [["5.000000:5", "4.000000:4"]]


def test_a_model_that_does_not_batch_classifies_the_whole_tensor() -> None:
    assert _classes(np.array([[0.2, 0.9], [0.7, 0.1]], np.float32), 3, batched=False) == [
        "0.900000:1",
        "0.700000:2",
        "0.200000:0",
    ]


@pytest.mark.parametrize(("datatype", "array"), [("FP16", np.zeros(2, np.float16)), ("BOOL", np.zeros(2, bool)),
                                                  ("BYTES", np.array([b"a"], dtype=np.object_))])  # fmt: skip
def test_types_triton_cannot_classify_are_refused(datatype: str, array: Any) -> None:
    response = InferResponse("m", "1", "", [OutputTensor("Y", datatype, array.shape, array)])
    with pytest.raises(InvalidArgumentError, match=f"unsupported type '{datatype}'"):
        classify(response, {"Y": 1}, False, {})


def _files(tmp_path: Path, contents: bytes) -> tuple[model_config_pb2.ModelConfig, ModelFiles]:
    (tmp_path / "labels.txt").write_bytes(contents)
    config = model_config_pb2.ModelConfig(name="m")
    config.output.add(name="Y", label_filename="labels.txt")
    config.output.add(name="Z")
    return config, ModelFiles("m", tmp_path)


def test_labels_are_lines_as_triton_reads_them(tmp_path: Path) -> None:
    config, files = _files(tmp_path, b"cat\n\ndog\r\nlast")
    assert read_labels(config, files) == {"Y": (b"cat", b"", b"dog\r", b"last")}
    config, files = _files(tmp_path, b"one\n")
    assert read_labels(config, files) == {"Y": (b"one",)}


def test_label_files_go_through_the_paths_choke_point(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("x\n")
    model = tmp_path / "m"
    model.mkdir()
    (model / "labels.txt").symlink_to(outside)
    config = model_config_pb2.ModelConfig(name="m")
    config.output.add(name="Y", label_filename="labels.txt")
    # The repository's author placed the link: followed by default, as Triton; refused in strict mode.
    assert read_labels(config, ModelFiles("m", model))
    with pytest.raises(InvalidArgumentError, match="leads outside the model's folder"):
        read_labels(config, ModelFiles("m", model, allow_links_outside=False))
    config.output[0].label_filename = "missing.txt"
    with pytest.raises(ModelConfigError, match="failed to open text file for read"):
        read_labels(config, ModelFiles("m", model))


def _grpc_request(set_parameter: Any, shm: bool = False) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="m")
    output = request.outputs.add(name="Y")
    set_parameter(output.parameters["classification"])
    if shm:
        output.parameters["shared_memory_region"].string_param = "r"
        output.parameters["shared_memory_byte_size"].int64_param = 4
    return bytes(request.SerializeToString())


def test_grpc_codec_reads_and_refuses_as_triton() -> None:
    def three(p: Any) -> None:
        p.int64_param = 3

    def zero(p: Any) -> None:
        p.int64_param = 0

    def unsigned(p: Any) -> None:
        p.uint64_param = 3

    assert decode_grpc(_grpc_request(three)).output_classes == {"Y": 3}
    with pytest.raises(
        InvalidArgumentError, match=r"^invalid value for 'classification' parameter, expected >= 0$"
    ):
        decode_grpc(_grpc_request(zero))
    with pytest.raises(InvalidArgumentError, match="expected int64_param"):
        decode_grpc(_grpc_request(unsigned))
    with pytest.raises(
        InvalidArgumentError, match="output can't set both 'shared_memory_region' and 'classification'"
    ):
        decode_grpc(_grpc_request(three, shm=True))


def test_client_encodes_class_count() -> None:
    head, _ = encode_request(
        WireRequest("m", "", (), (WireOutputRequest("Y", None, 4), WireOutputRequest("Z")))
    )
    assert head.outputs[0].parameters["classification"].int64_param == 4
    assert "classification" not in head.outputs[1].parameters


def test_http_codec_zero_asks_for_the_tensor() -> None:
    def decode(count: object) -> dict[str, int]:
        body = json.dumps({"inputs": [], "outputs": [{"name": "Y", "parameters": {"classification": count}}]})
        return decode_http(body.encode(), None, "m", "")[0].output_classes

    assert decode(2) == {"Y": 2}
    assert decode(0) == {}
    with pytest.raises(InvalidArgumentError, match="non-unsigned-integer"):
        decode(False)


def test_large_outputs_are_classified_off_the_loop() -> None:
    rows = np.tile(np.arange(OFF_LOOP_ELEMENTS // 4, dtype=np.float32), (4, 1))
    small = rows[:1, :8]
    seen: list[str] = []

    async def run(array: Any) -> Any:
        loop_thread = threading.get_ident()

        def spy(*args: Any) -> Any:
            seen.append("loop" if threading.get_ident() == loop_thread else "thread")
            return classify(*args)

        response = InferResponse("m", "1", "", [OutputTensor("Y", "FP32", array.shape, array)])
        with mock.patch("sonic.server.classification.top_k.classify", spy):
            return await classify_off_loop(response, {"Y": 1}, True, {})

    big = asyncio.run(run(rows))
    assert [row[0] for row in big.outputs[0].array.tolist()] == [
        f"{OFF_LOOP_ELEMENTS // 4 - 1}.000000:{OFF_LOOP_ELEMENTS // 4 - 1}".encode()
    ] * 4
    asyncio.run(run(small))
    assert seen == ["thread", "loop"]
