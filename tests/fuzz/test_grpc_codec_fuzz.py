"""Fuzzing the gRPC message codec: ``ModelInferRequest`` / ``ModelStreamInfer`` decode, the raw-contents
splitter, and every other request message the server parses.

Requests are built valid (typed ``contents`` or ``raw_input_contents``, shared-memory and request
parameters, outputs) and then mutated at the byte level, so decoding gets past protobuf into our checks.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError
from sonic.protocol.grpc_codec import (
    SPLIT_ABOVE_BYTES,
    decode_infer_request,
    decode_response,
    encode_stream_error,
    split_response,
    split_stream_response,
)
from sonic.protocol.wire import RAW_INPUT_CONTENTS_TAG, RAW_OUTPUT_CONTENTS_TAG, split_raw_contents
from sonic.testing.fuzz import mutated, one_in, run_bounded

MAX_INPUT_BYTES = 4096
# A decode keeps views of the message; what it allocates besides is bounded by the message's size.
PEAK_BYTES = 64 * MAX_INPUT_BYTES + (256 << 10)

names = st.text(min_size=0, max_size=12)
datatype_names = st.sampled_from([*dtypes.BY_NAME, "FP8", "", "int32"])
shapes = st.lists(st.integers(-2, 6) | st.sampled_from([2**31, 2**62, -(2**63)]), max_size=4)
parameter_values = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(2**63, 2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=8),
)
# Values of each typed-contents field, over the whole range its protobuf type carries.
CONTENTS: dict[str, st.SearchStrategy[Any]] = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": st.integers(-(2**63), 2**63 - 1),
    "uint_contents": st.integers(0, 2**32 - 1),
    "uint64_contents": st.integers(0, 2**64 - 1),
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=8),
}
parameter_names = st.sampled_from(
    [
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "binary_data_output",
        "shared_memory_region",
        "shared_memory_byte_size",
        "shared_memory_offset",
        "custom",
    ]
)


def _set(target: Any, key: str, value: object) -> None:
    """One ``InferParameter``, its oneof chosen by the value's type."""
    param = target[key]
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int):
        if value >= 2**63:
            param.uint64_param = value
        else:
            param.int64_param = value
    elif isinstance(value, float):
        param.double_param = value
    else:
        assert isinstance(value, str)
        param.string_param = value


@st.composite
def infer_requests(draw: st.DrawFn) -> bytes:
    """A ``ModelInferRequest``, mostly consistent (a shape and data that match), serialized."""
    request = service_pb2.ModelInferRequest(
        model_name=draw(names), model_version=draw(st.sampled_from(["", "1", "2", "x"])), id=draw(names)
    )
    for key, value in draw(st.dictionaries(parameter_names, parameter_values, max_size=3)).items():
        _set(request.parameters, key, value)
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        datatype = dtypes.BY_NAME[draw(st.sampled_from(list(dtypes.BY_NAME)))]
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        tensor = request.inputs.add(
            name=draw(names), datatype=draw(st.just(datatype.name) | datatype_names), shape=shape
        )
        if draw(one_in(10)):  # in shared memory
            for key in draw(
                st.lists(
                    st.sampled_from(
                        ["shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"]
                    ),
                    unique=True,
                )
            ):
                _set(tensor.parameters, key, draw(parameter_values))
            continue
        count = dtypes.element_count(shape)
        if raw:
            request.raw_input_contents.append(draw(st.binary(max_size=count * 8 + 8)))
        elif datatype.contents_field is not None:
            field = getattr(tensor.contents, datatype.contents_field)
            field.extend(
                draw(st.lists(CONTENTS[datatype.contents_field], min_size=count, max_size=count + 1))
            )
    for _ in range(draw(st.integers(0, 2))):
        output = request.outputs.add(name=draw(names))
        for key, value in draw(st.dictionaries(parameter_names, parameter_values, max_size=3)).items():
            _set(output.parameters, key, value)
    data: bytes = request.SerializeToString()
    return data[:MAX_INPUT_BYTES]


def _decode(data: bytes) -> None:
    request = decode_infer_request(data)
    for tensor in request.inputs:  # exactly one source of data each
        assert (tensor.raw is not None) + (tensor.array is not None) + (tensor.shm is not None) == 1


@given(infer_requests().flatmap(mutated))
def test_model_infer_request_decode(data: bytes) -> None:
    run_bounded(lambda: _decode(data), max_peak_bytes=PEAK_BYTES)


@given(st.binary(max_size=512))
def test_model_infer_request_decode_of_random_bytes(data: bytes) -> None:
    run_bounded(lambda: _decode(data), max_peak_bytes=PEAK_BYTES)


@given(infer_requests().flatmap(mutated), st.text(max_size=64))
def test_stream_error_answers_any_message(data: bytes, message: str) -> None:
    """``ModelStreamInfer``: a failed message is answered in the stream, echoing the id when there is one."""
    answer = run_bounded(lambda: encode_stream_error(data, message), allowed=(), max_peak_bytes=PEAK_BYTES)
    assert answer.value is not None
    assert service_pb2.ModelStreamInferResponse.FromString(answer.value).error_message == message


@given(infer_requests().flatmap(mutated), st.sampled_from([RAW_INPUT_CONTENTS_TAG, RAW_OUTPUT_CONTENTS_TAG]))
def test_raw_contents_split_keeps_every_byte(data: bytes, tag: int) -> None:
    """What the splitter accepts is cut exactly: the fields it takes out plus the rest are the message."""
    outcome = run_bounded(
        lambda: split_raw_contents(data, tag), allowed=(InvalidArgumentError,), max_peak_bytes=PEAK_BYTES
    )
    if outcome.value is not None:
        rest, raw = outcome.value
        assert len(rest) + sum(len(r) for r in raw) <= len(data)


# Every other request message the server decodes (both gRPC front ends parse them with protobuf).
UNARY_REQUESTS = [
    getattr(service_pb2, f"{name}Request")
    for name in (
        "ServerLive",
        "ServerReady",
        "ModelReady",
        "ServerMetadata",
        "ModelMetadata",
        "ModelConfig",
        "ModelStatistics",
        "RepositoryIndex",
        "RepositoryModelLoad",
        "RepositoryModelUnload",
        "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister",
        "SystemSharedMemoryStatus",
        "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister",
        "CudaSharedMemoryStatus",
    )
]


@st.composite
def unary_requests(draw: st.DrawFn) -> tuple[Any, bytes]:
    message_type = draw(st.sampled_from(UNARY_REQUESTS))
    message = message_type()
    for field in message.DESCRIPTOR.fields:  # scalars only: none of these messages repeats one
        if field.type == field.TYPE_STRING:
            setattr(message, field.name, draw(names))
        elif field.type in {field.TYPE_INT64, field.TYPE_UINT64}:
            high = 2**63 - 1 if field.type == field.TYPE_INT64 else 2**64 - 1
            setattr(message, field.name, draw(st.integers(0, high)))
        elif field.type == field.TYPE_BOOL:
            setattr(message, field.name, draw(st.booleans()))
    if message_type is service_pb2.RepositoryModelLoadRequest:
        message.parameters["config"].string_param = draw(st.text(max_size=32))
    return message_type, draw(mutated(message.SerializeToString()))


@given(unary_requests())
def test_unary_request_messages_parse_or_fail_cleanly(case: tuple[Any, bytes]) -> None:
    """protobuf's parser is the decoder here: it may refuse (DecodeError, answered INTERNAL as grpcio
    and Triton answer it), never anything else, never unbounded."""
    message_type, data = case
    run_bounded(lambda: message_type.FromString(data), allowed=(DecodeError,), max_peak_bytes=PEAK_BYTES)


@st.composite
def infer_responses(draw: st.DrawFn) -> bytes:
    """A ``ModelInferResponse`` (or, streamed, a ``ModelStreamInferResponse`` around one) as a server
    sends it, large enough now and then for the client's hand-cut path (tensors kept as views)."""
    response = service_pb2.ModelInferResponse(model_name=draw(names), model_version="1", id=draw(names))
    for _ in range(draw(st.integers(0, 3))):
        response.outputs.add(name=draw(names), datatype=draw(datatype_names), shape=draw(shapes))
        size = draw(st.sampled_from([0, 8, SPLIT_ABOVE_BYTES]))
        response.raw_output_contents.append(bytes(size))
    data: bytes = response.SerializeToString()
    if draw(st.booleans()):
        data = service_pb2.ModelStreamInferResponse(
            infer_response=response, error_message=draw(names)
        ).SerializeToString()
    return draw(mutated(data))


@given(infer_responses())
def test_client_reads_any_response(data: bytes) -> None:
    """The client side of the codec, for a server (or anything in the path) that sends anything: a
    response with its tensors, or protobuf's DecodeError / InvalidArgumentError, within memory bounds."""

    def read() -> None:
        for split in (split_response, split_stream_response):
            try:
                head, raw = split(data)[:2]
            except (DecodeError, InvalidArgumentError):
                continue
            decode_response(head, raw)

    run_bounded(read, allowed=(), max_peak_bytes=4 * len(data) + PEAK_BYTES)
