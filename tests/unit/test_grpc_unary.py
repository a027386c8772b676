"""One unary call's answer (sonic.grpc.unary): every way a server's answer is taken or refused, in the
order a stream delivers it; both client drivers rely on these outcomes."""

from __future__ import annotations

import pytest

from sonic.grpc.call import grpc_message_prefix
from sonic.grpc.unary import ENDED_WITHOUT_STATUS, Failure, UnaryAnswer
from sonic.h2.frames import ProtocolError
from sonic.protocol.errors import GrpcCode

OK_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]
OK_TRAILERS = [(b"grpc-status", b"0")]


def message(payload: bytes, *, compressed: bool = False) -> memoryview:
    prefix = bytearray(grpc_message_prefix(len(payload)))
    prefix[0] = int(compressed)
    return memoryview(bytes(prefix) + payload)


def test_headers_one_message_and_ok_trailers_give_the_message() -> None:
    answer = UnaryAnswer(1024)
    assert answer.headers_received(OK_HEADERS, end_stream=False) is None
    assert answer.data_received(message(b"abc")) is None
    assert bytes(answer.headers_received(OK_TRAILERS, end_stream=True)) == b"abc"  # type: ignore[arg-type]


def test_trailers_only_carry_the_status() -> None:
    answer = UnaryAnswer(1024)
    block = [*OK_HEADERS, (b"grpc-status", b"8"), (b"grpc-message", b"model%20busy")]
    assert answer.headers_received(block, end_stream=True) == Failure(
        GrpcCode.RESOURCE_EXHAUSTED, "model busy"
    )


@pytest.mark.parametrize(("status", "code"), [(b"503", GrpcCode.UNAVAILABLE), (b"404", GrpcCode.UNKNOWN)])
def test_a_non_grpc_answer_is_refused_at_its_headers(status: bytes, code: GrpcCode) -> None:
    failure = UnaryAnswer(1024).headers_received([(b":status", status)], end_stream=False)
    assert failure == Failure(code, f"HTTP status {status.decode()} instead of a gRPC response")


def test_a_second_header_block_that_does_not_end_the_stream_is_a_protocol_error() -> None:
    answer = UnaryAnswer(1024)
    answer.headers_received(OK_HEADERS, end_stream=False)
    with pytest.raises(ProtocolError, match="second HEADERS"):
        answer.headers_received(OK_TRAILERS, end_stream=False)


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        ([], "an OK response without a message"),
        ([message(b"ab"), message(b"cdef")[:-2]], "the response ended inside a message"),
        ([message(b"z", compressed=True)], "a compressed response without a grpc-encoding header"),
    ],
    ids=["no-message", "partial", "compressed-no-encoding"],
)
def test_ok_trailers_after_too_little_are_internal(data: list[memoryview], detail: str) -> None:
    answer = UnaryAnswer(1024)
    answer.headers_received(OK_HEADERS, end_stream=False)
    for piece in data:
        assert answer.data_received(piece) is None
    assert answer.headers_received(OK_TRAILERS, end_stream=True) == Failure(GrpcCode.INTERNAL, detail)


def test_two_messages_and_oversized_ones_are_refused_as_data_arrives() -> None:
    answer = UnaryAnswer(1024)
    answer.headers_received(OK_HEADERS, end_stream=False)
    two = memoryview(bytes(message(b"a")) + bytes(message(b"b")))
    assert answer.data_received(two) == Failure(
        GrpcCode.INTERNAL, "more than one response message in a unary call"
    )
    big = UnaryAnswer(4)
    big.headers_received(OK_HEADERS, end_stream=False)
    failure = big.data_received(message(b"12345"))
    assert failure is not None
    assert failure.status is GrpcCode.RESOURCE_EXHAUSTED
    assert "5 bytes, larger than the limit of 4" in failure.detail


def test_a_stream_ended_by_data_has_no_status() -> None:
    assert Failure(GrpcCode.INTERNAL, "the response ended without grpc-status") == ENDED_WITHOUT_STATUS
