"""KServe v2 gRPC constants (model states as the repository index words them), and protobuf wire-format
helpers for the inference hot path.

``ModelInferRequest`` and ``ModelInferResponse`` carry tensors in repeated ``bytes`` fields
(``raw_input_contents`` = 7, ``raw_output_contents`` = 6). Parsing them through protobuf copies each
tensor twice; here the top-level fields are walked by hand so tensor bytes stay views of the
received buffer, and only the small remainder goes through protobuf.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from sonic.protocol.errors import InvalidArgumentError

SERVICE = "inference.GRPCInferenceService"
SERVICE_PATH = f"/{SERVICE}/"  # + method name: the HTTP/2 :path of a call
# Triton's clients and server use INT32_MAX: requests that fit one fit the other.
MAX_MESSAGE_BYTES = 2**31 - 1


class ModelState(enum.StrEnum):
    """A model version's lifecycle state; the value is the word Triton's repository index sends."""

    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"  # failed to load, or unloaded (the reason says which)
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"
    UNKNOWN = "UNKNOWN"  # a word this side does not know
    NONE = ""  # no state: a repository model never loaded, or a server that leaves the field empty

    @classmethod
    def from_wire(cls, word: str) -> ModelState:
        """The state a peer sent; a word we do not know is UNKNOWN, never an error."""
        try:
            return cls(word)
        except ValueError:
            return cls.UNKNOWN


# Field keys (field number << 3 | wire type 2, length-delimited), each fitting one byte.
RAW_INPUT_CONTENTS_TAG = (7 << 3) | 2  # ModelInferRequest.raw_input_contents
RAW_OUTPUT_CONTENTS_TAG = (6 << 3) | 2  # ModelInferResponse.raw_output_contents
STREAM_INFER_RESPONSE_TAG = (2 << 3) | 2  # ModelStreamInferResponse.infer_response

_RAW_INPUT_KEY = bytes([RAW_INPUT_CONTENTS_TAG])
_RAW_OUTPUT_KEY = bytes([RAW_OUTPUT_CONTENTS_TAG])
_STREAM_INFER_RESPONSE_KEY = bytes([STREAM_INFER_RESPONSE_TAG])


def _read_varint(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            msg = "malformed protobuf message: truncated varint"
            raise InvalidArgumentError(msg)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            msg = "malformed protobuf message: varint too long"
            raise InvalidArgumentError(msg)


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def split_raw_contents(
    data: bytes | bytearray | memoryview, tag: int = RAW_INPUT_CONTENTS_TAG
) -> tuple[bytes | bytearray | memoryview, list[memoryview]]:
    """Cut the ``tag`` fields out of a serialized message: (rest of the message, views of those fields)."""
    view = memoryview(data)
    raw: list[memoryview] = []
    kept: list[memoryview] = []
    kept_from = 0
    pos = 0
    end = len(data)
    while pos < end:
        field_start = pos
        key, pos = _read_varint(data, pos)
        wire_type = key & 7
        if wire_type == 2:
            length, pos = _read_varint(data, pos)
            field_end = pos + length
        elif wire_type == 0:
            _, field_end = _read_varint(data, pos)
        elif wire_type == 1:
            field_end = pos + 8
        elif wire_type == 5:
            field_end = pos + 4
        else:
            raise InvalidArgumentError(
                f"malformed protobuf message: wire type {wire_type} at byte {field_start}"
            )
        if field_end > end:
            msg = "malformed protobuf message: field runs past the end of the message"
            raise InvalidArgumentError(msg)
        if key == tag:
            kept.append(view[kept_from:field_start])
            raw.append(view[pos:field_end])
            kept_from = field_end
        pos = field_end
    if not raw:
        return data, raw
    kept.append(view[kept_from:])
    return b"".join(kept), raw


def parts_size(parts: Sequence[bytes | memoryview]) -> int:
    """Bytes in a message given as pieces."""
    return sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in parts)


def _length_delimited(key: bytes, contents: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """One ``key`` field per item, as pieces (the items are not copied)."""
    parts: list[bytes | memoryview] = []
    for item in contents:
        parts += (key, encode_varint(item.nbytes if isinstance(item, memoryview) else len(item)), item)
    return parts


def raw_input_parts(contents: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """``raw_input_contents`` fields, as pieces to follow a serialized request head."""
    return _length_delimited(_RAW_INPUT_KEY, contents)


def raw_contents_parts(head: bytes, contents: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """A serialized message followed by ``raw_output_contents`` fields, as pieces (tensors not copied)."""
    return [head, *_length_delimited(_RAW_OUTPUT_KEY, contents)]


def append_raw_contents(head: bytes, contents: Sequence[bytes | memoryview]) -> bytes:
    """A serialized message followed by ``raw_output_contents`` fields: one copy of each tensor."""
    return b"".join(raw_contents_parts(head, contents))


def wrap_stream_response(infer_response: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """A ``ModelStreamInferResponse`` around a serialized ``ModelInferResponse`` given as pieces, as pieces."""
    return [_STREAM_INFER_RESPONSE_KEY, encode_varint(parts_size(infer_response)), *infer_response]
