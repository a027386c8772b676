"""Crashes the fuzz tests (tests/fuzz) found, each as the minimal input that caused it, fixed.

Each test names the decoder, what it did before the fix, and what it answers now.
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from typing import Any

import pytest
from tritonclient.grpc import service_pb2

from sonic.grpc.call import trailers_status
from sonic.h2.frames import PREFACE, ErrorCode, Flag, FrameType, frame, settings_frame
from sonic.h2.headers import Headers
from sonic.h2.server import ServerRole
from sonic.h2.stream import Stream
from sonic.protocol import dtypes, grpc_codec, http_json
from sonic.protocol.errors import GrpcCode, InvalidArgumentError, UnauthenticatedError
from sonic.protocol.shm_names import owner_exited, pid_namespace
from sonic.server.config import AuthConfig
from sonic.server.guard import TokenVerifier
from sonic.testing.h2 import SilentHandler, parse_frames


def test_grpc_message_that_is_not_ascii_is_read_not_raised() -> None:
    """A client read a server's ``grpc-message`` of raw bytes with UnicodeDecodeError (the call ended with
    the decode error instead of the server's status); the gRPC spec asks decoders never to fail on it."""
    assert trailers_status([(b"grpc-status", b"0"), (b"grpc-message", b"\x80")]) == (GrpcCode.OK, "\ufffd")
    raw_utf8 = "d\u00e9j\u00e0 vu".encode()
    assert trailers_status([(b"grpc-status", b"3"), (b"grpc-message", raw_utf8)]) == (
        GrpcCode.INVALID_ARGUMENT,
        "d\u00e9j\u00e0 vu",
    )


def _json_request(datatype: str, data: object, shape: list[int] | None = None) -> bytes:
    inputs = [{"name": "x", "datatype": datatype, "shape": [1] if shape is None else shape, "data": data}]
    return json.dumps({"inputs": inputs}).encode()


def test_bytes_json_data_that_is_a_number_is_refused_not_allocated() -> None:
    """``"data": [2147483648]`` for a BYTES input was ``bytes(2147483648)``: 2 GiB of zeros allocated
    for a request of 80 bytes. BYTES elements are strings (or bytes over gRPC), anything else a 400."""
    for element in (2147483648, None, 1.5, {"a": 1}):
        with pytest.raises(InvalidArgumentError, match=r"non-string as string \(BYTES element 0 is"):
            http_json.decode_infer_request(_json_request("BYTES", [element]), None, "m", "")
    with pytest.raises(InvalidArgumentError, match="attempt to access JSON non-array as array"):
        http_json.decode_infer_request(_json_request("BYTES", "abc", [3]), None, "m", "")


@pytest.mark.parametrize(("datatype", "data"), [("INT32", 5), ("INT32", True), ("BOOL", 3), ("FP32", "x")])
def test_json_data_that_is_no_array_is_refused(datatype: str, data: object) -> None:
    """``"data": 5`` for an INT32 [1] was taken as [5]; Triton 2.51 refuses it (a 500 in its words)."""
    with pytest.raises(
        InvalidArgumentError, match="Unable to parse 'data': attempt to access JSON non-array as array"
    ):
        http_json.decode_infer_request(_json_request(datatype, data, [1]), None, "m", "")


@pytest.mark.parametrize(
    ("datatype", "data"),
    [
        ("UINT8", [2147483648]),  # numpy: DeprecationWarning, then a wrapped value (numpy 2: OverflowError)
        ("UINT8", [-1]),
        ("INT32", [10**30]),  # OverflowError: Python int too large to convert to C long
        ("INT32", [[10**30]]),
        ("INT32", [1e30]),
        ("INT64", [[float("inf")]]),
        ("UINT64", [-1]),
    ],
)
def test_json_integers_out_of_range_are_a_400(datatype: str, data: object) -> None:
    """Integers past the datatype's range raised OverflowError (answered INTERNAL), or were wrapped."""
    with pytest.raises(InvalidArgumentError, match=r"out of range|finite|not .* values|access JSON non-"):
        http_json.decode_infer_request(_json_request(datatype, data), None, "m", "")


def test_typed_grpc_contents_out_of_range_are_a_400() -> None:
    """The same check on gRPC typed contents: int_contents carries int32, INT8 takes less."""
    request = service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="INT8", shape=[1]).contents.int_contents.append(300)
    with pytest.raises(InvalidArgumentError, match="value 300 is out of range for INT8"):
        grpc_codec.decode_infer_request(request.SerializeToString())


def test_json_integers_in_range_still_decode() -> None:
    request, _ = http_json.decode_infer_request(_json_request("UINT64", [2**64 - 1]), None, "m", "")
    assert request.inputs[0].array is not None
    assert int(request.inputs[0].array[0]) == 2**64 - 1
    request, _ = http_json.decode_infer_request(_json_request("INT8", [[-128, 127]], [2]), None, "m", "")
    assert request.inputs[0].array is not None
    assert request.inputs[0].array.tolist() == [-128, 127]


def test_bytes_tensor_count_from_the_shape_allocates_nothing_before_the_bytes_are_read() -> None:
    """A BYTES input of shape [2**25] and no bytes made an array of 2**25 elements (268 MB) before its
    first length prefix was checked; 2**28 took 2 GiB. Elements are now collected as they are read."""
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArgumentError, match="element 0 of 33554432 has no 4-byte length prefix"):
            dtypes.array_from_bytes(b"", dtypes.BY_NAME["BYTES"], (2**25,), "input 'x'")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.parametrize("datatype", ["BYTES", "FP32"])
def test_shape_numpy_cannot_index_is_a_400(datatype: str) -> None:
    """Dimensions multiplying past numpy's index range, with a 0 among them (no elements, so the byte
    count matches), raised numpy's ValueError from reshape (answered INTERNAL)."""
    shape = (2**40, 2**40, 0)
    with pytest.raises(InvalidArgumentError, match="cannot be used"):
        dtypes.array_from_bytes(b"", dtypes.BY_NAME[datatype], shape, "input 'x'")


def test_region_names_with_numbers_past_any_pid_are_not_a_clients() -> None:
    """``sonic_<pid>_n<namespace>_`` with a pid past C's long raised OverflowError from os.kill, and one of
    5000 digits ValueError from int(): the server's registry ran the check before every register and
    status call, so one such region name broke both for every client until it was unregistered."""
    namespace = pid_namespace()
    for name in (
        f"sonic_99999999999999999999_n{namespace}_x",
        f"sonic_{'9' * 5000}_n{namespace}_x",
        f"sonic_1_n{'9' * 5000}_x",
        f"sonic_\u0661_n{namespace}_x",  # digits of another script
        f"sonic_0_n{namespace}_x",  # os.kill(0, ...) would ask about our own process group
    ):
        assert owner_exited(name, namespace) is False


def test_authorization_header_that_is_not_utf8_is_unauthenticated() -> None:
    """aiohttp hands header bytes that are not UTF-8 over as lone surrogates (``Bearer \\xff`` arrives as
    'Bearer \\udcff'); the token check encoded it to UTF-8 and raised UnicodeEncodeError: a 500 and a
    logged traceback per request, for a client that had not authenticated."""
    verifier = TokenVerifier(AuthConfig(tokens=frozenset({"alpha"})))
    with pytest.raises(UnauthenticatedError, match="not valid"):
        verifier.verify(b"Bearer \xff".decode("utf-8", errors="surrogateescape"))


def test_padded_headers_frame_without_payload_is_a_protocol_error() -> None:
    """A HEADERS frame with the PADDED flag and no payload read its pad length past the end (IndexError
    out of ``receive_data``: asyncio's "Fatal error: protocol.data_received() call failed" and a dropped
    connection with no GOAWAY). RFC 9113 section 6.2: a PROTOCOL_ERROR."""
    core = _NoStreams()
    core.h2.start(0.0)
    core.h2.receive_data(
        PREFACE + settings_frame({}) + frame(FrameType.HEADERS, Flag.PADDED | Flag.END_HEADERS, 1)
    )
    frames = parse_frames(b"".join(bytes(piece) for piece in core.h2.data_to_send()))
    goaways = [payload for frame_type, _, _, payload in frames if frame_type == FrameType.GOAWAY]
    assert goaways
    assert struct.unpack(">I", goaways[0][4:8])[0] == ErrorCode.PROTOCOL_ERROR


class _NoStreams(SilentHandler):
    """A server-role core (``h2``) whose handler records nothing: the frame above never opens a stream."""

    def __init__(self) -> None:
        self.h2 = ServerRole(self).connection

    def headers_received(self, stream: Stream[Any], headers: Headers, end_stream: bool) -> None:
        raise AssertionError("no stream opens")


def test_json_integers_mixed_with_other_values_are_range_checked() -> None:
    """``[2147483648, null]`` for UINT8 made an object array, which the range check skipped: numpy
    wrapped the value (a DeprecationWarning). Each integer of such data is checked now (null is refused
    first, in Triton's words; an integer past uint64 makes an object array too)."""
    with pytest.raises(InvalidArgumentError, match="value 2147483648 is out of range for UINT8"):
        http_json.decode_infer_request(_json_request("UINT8", [2147483648, 2**70], [2]), None, "m", "")
    with pytest.raises(InvalidArgumentError, match="non-unsigned-integer as unsigned-integer"):
        http_json.decode_infer_request(_json_request("UINT8", [2147483648, None], [2]), None, "m", "")


def test_json_floats_past_fp32_become_infinities_as_in_triton() -> None:
    """``1e300`` for FP32 raised numpy's RuntimeWarning (overflow in cast) on the way to inf; Triton's C++
    cast gives inf silently, and so does sonic now (no warning: an error where warnings are errors)."""
    request, _ = http_json.decode_infer_request(_json_request("FP32", [1e300, -1e300], [2]), None, "m", "")
    assert request.inputs[0].array is not None
    assert request.inputs[0].array.tolist() == [float("inf"), float("-inf")]


@pytest.mark.parametrize(("datatype", "value"), [("UINT64", 2.0**64), ("INT64", 2.0**63)])
def test_floats_at_the_top_of_64_bit_ranges_are_out_of_range(datatype: str, value: float) -> None:
    """As floats, 2**64 - 1 and 2**63 - 1 round up to 2**64 and 2**63, so a plain comparison let those
    through and the cast overflowed (numpy's RuntimeWarning, a garbage value)."""
    with pytest.raises(InvalidArgumentError, match="out of range"):
        dtypes.array_from_contents([value], dtypes.BY_NAME[datatype], (1,), "input 'x'")
