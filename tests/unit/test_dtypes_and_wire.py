from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.utils import serialize_byte_tensor

from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError
from sonic.protocol.wire import append_raw_contents, split_raw_contents

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("datatype", [d for d in dtypes.DATATYPES if d.name != "BYTES"], ids=lambda d: d.name)
def test_round_trip_every_fixed_size_datatype(datatype: dtypes.Datatype) -> None:
    rng = np.random.default_rng(0)
    array = (rng.random((3, 5)) * 100).astype(datatype.numpy)
    encoded = bytes(dtypes.array_to_bytes(array, datatype))
    assert len(encoded) == array.size * datatype.numpy.itemsize
    decoded = dtypes.array_from_bytes(encoded, datatype, (3, 5), "t")
    np.testing.assert_array_equal(decoded, array)
    assert dtypes.from_numpy(array.dtype) is datatype


@pytest.mark.parametrize(
    "array",
    [
        np.arange(15, dtype=np.float32).reshape(3, 5).T,  # not C-contiguous: copied
        np.ones((0, 16), np.float32),  # a zero in the shape: no buffer cast
        np.arange(6, dtype=">i4").reshape(2, 3),  # big-endian: its bytes as they are
        np.array(3.5, np.float64),  # 0-d
        np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16),  # no buffer format
        np.array([[True, False]]),
    ],
    ids=["transposed", "empty", "big-endian", "scalar", "bf16", "bool"],
)
def test_output_bytes_are_the_arrays_in_c_order(array: npt.NDArray[Any]) -> None:
    datatype = dtypes.from_numpy(array.dtype.newbyteorder("=")) if array.dtype.byteorder == ">" else None
    datatype = datatype or dtypes.from_numpy(array.dtype)
    assert bytes(dtypes.array_to_bytes(array, datatype)) == np.ascontiguousarray(array).tobytes()


def test_bf16_keeps_two_bytes() -> None:
    array = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    assert len(bytes(dtypes.array_to_bytes(array, dtypes.BY_NAME["BF16"]))) == 4


def test_bytes_encoding_matches_tritonclient() -> None:
    array = np.array([[b"a", b""], ["é".encode(), b"\x00\x01"]], dtype=np.object_)
    ours = dtypes.serialize_bytes_tensor(array)
    assert ours == serialize_byte_tensor(array).item()
    decoded = dtypes.array_from_bytes(ours, dtypes.BY_NAME["BYTES"], (2, 2), "t")
    np.testing.assert_array_equal(decoded, array)


@pytest.mark.parametrize(
    ("elements", "expected"),
    [
        ([1, 2], [b"1", b"2"]),
        ([1.5, 2.0], [b"1.5", b"2.0"]),
        (["a", "\u00e9"], [b"a", "\u00e9".encode()]),
        ([b"x", b"\x00y"], [b"x", b"\x00y"]),
        ([1, "s", b"b", 1.5, True, None], [b"1", b"s", b"b", b"1.5", b"True", b"None"]),
        ([np.bytes_(b"q"), np.str_("r"), np.float32(1.5), np.int64(3)], [b"q", b"r", b"1.5", b"3"]),
    ],
)
def test_bytes_elements_are_written_as_triton_python_backend_writes_them(
    elements: list[object], expected: list[bytes]
) -> None:
    """Bytes as they are, anything else as str(x) in UTF-8 (Triton's serialize_byte_tensor): the number
    1 is b"1", not bytes(1), one zero byte."""
    array = np.empty(len(elements), dtype=np.object_)
    array[:] = elements
    encoded = dtypes.serialize_bytes_tensor(array)
    decoded = dtypes.array_from_bytes(encoded, dtypes.BY_NAME["BYTES"], (len(elements),), "t")
    assert decoded.tolist() == expected
    assert bytes(dtypes.array_to_bytes(array, dtypes.BY_NAME["BYTES"])) == encoded


def test_fixed_width_string_arrays_keep_their_text() -> None:
    assert dtypes.serialize_bytes_tensor(np.array([b"ab", b"c"])) == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    assert (
        dtypes.serialize_bytes_tensor(np.array(["ab", "\u00e9"]))
        == b"\x02\x00\x00\x00ab\x02\x00\x00\x00\xc3\xa9"
    )


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\x01\x00", "no 4-byte length prefix"),
        (b"\x09\x00\x00\x00abc", "declares 9 bytes"),
        (b"\x00" * 12, "left over"),
    ],
)
def test_malformed_bytes_are_rejected(payload: bytes, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        dtypes.array_from_bytes(payload, dtypes.BY_NAME["BYTES"], (2,), "model 'm' input 'x'")


def test_wrong_byte_size_names_expected_and_given() -> None:
    with pytest.raises(InvalidArgumentError, match=r"unexpected total byte size 12 .* expecting 16"):
        dtypes.array_from_bytes(b"\x00" * 12, dtypes.BY_NAME["FP32"], (4,), "t")


def test_typed_contents() -> None:
    array = dtypes.array_from_contents([1, 2, 3, 4], dtypes.BY_NAME["INT16"], (2, 2), "t")
    assert array.dtype == np.int16
    with pytest.raises(InvalidArgumentError, match="expected 4 INT16 elements"):
        dtypes.array_from_contents([1, 2, 3], dtypes.BY_NAME["INT16"], (2, 2), "t")


def test_split_raw_contents_keeps_views_of_the_buffer() -> None:
    request = service_pb2.ModelInferRequest(model_name="m", id="r1")
    request.inputs.add(name="a", datatype="FP32", shape=[1, 2])
    request.inputs.add(name="b", datatype="FP32", shape=[1, 2])
    request.parameters["priority"].uint64_param = 2
    big = bytes(range(256)) * 1000
    request.raw_input_contents.extend([big, b"\x01" * 8])
    data = request.SerializeToString()
    rest, raw = split_raw_contents(data)
    parsed = service_pb2.ModelInferRequest.FromString(rest)
    assert parsed.model_name == "m"
    assert parsed.id == "r1"
    assert [t.name for t in parsed.inputs] == ["a", "b"]
    assert parsed.parameters["priority"].uint64_param == 2
    assert not parsed.raw_input_contents
    assert [bytes(v) for v in raw] == [big, b"\x01" * 8]
    assert raw[0].obj is data  # a view, not a copy


def test_append_raw_contents_is_a_valid_response() -> None:
    head = service_pb2.ModelInferResponse(model_name="m", id="x")
    head.outputs.add(name="o", datatype="UINT8", shape=[3])
    data = append_raw_contents(head.SerializeToString(), [b"abc", memoryview(b"de" * 100)])
    parsed = service_pb2.ModelInferResponse.FromString(data)
    assert list(parsed.raw_output_contents) == [b"abc", b"de" * 100]
    assert parsed.model_name == "m"


def test_truncated_message_is_invalid() -> None:
    with pytest.raises(InvalidArgumentError, match="malformed"):
        split_raw_contents(b"\x3a\xff\xff")


@pytest.mark.parametrize(
    ("datatype", "values", "message"),
    [
        ("INT16", [1, 1.5], "t: contents are not INT16 values: 1.5 is not an integer"),
        ("UINT8", [True, False], "t: contents are not UINT8 values: True is not an integer"),
        ("BOOL", [300, True], "t: contents are not BOOL values: 300 is not a boolean"),
        ("BOOL", ["yes", "no"], "t: contents are not BOOL values: 'yes' is not a boolean"),
    ],
)
def test_json_values_of_another_kind_are_refused_not_converted(
    datatype: str, values: list[object], message: str
) -> None:
    # Found by the differential tests: numpy truncated 1.5 to 1 and made 300 true; Triton refuses them.
    with pytest.raises(InvalidArgumentError) as error:
        dtypes.array_from_contents(values, dtypes.BY_NAME[datatype], (2,), "t")
    assert error.value.message == message
