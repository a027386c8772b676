"""The blocking fast path's connection (sonic.client.blocking) against a plain TCP peer on loopback:
what it does when the server says nothing, or closes, before the call's answer."""

from __future__ import annotations

import socket
import time

import pytest

from sonic.client.blocking import BlockingConnection, Unanswered
from sonic.client.errors import DeadlineExceededError, ServerError, UnavailableError
from sonic.grpc.call import grpc_message_prefix
from sonic.h2.frames import Flag, FrameType, frame, settings_frame
from sonic.h2.headers import encode_headers
from sonic.protocol.errors import GrpcCode

MESSAGE: list[bytes | memoryview] = [grpc_message_prefix(0)]


def _connect(server: socket.socket) -> tuple[BlockingConnection, socket.socket]:
    port = server.getsockname()[1]
    connection = BlockingConnection(f"127.0.0.1:{port}", "127.0.0.1", port, 5.0)
    peer, _ = server.accept()
    return connection, peer


def test_a_silent_server_misses_the_deadline_and_the_connection_is_dropped() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        connection, peer = _connect(server)
        with peer:
            start = time.monotonic()
            with pytest.raises(DeadlineExceededError, match=r"no response within 0\.2 s"):
                connection.exchange(b"", MESSAGE, 0.2)
            elapsed_s = time.monotonic() - start
            assert 0.2 <= elapsed_s < 2.0
            assert not connection.usable
            assert peer.recv(1 << 16).startswith(b"PRI * HTTP/2.0")  # the preface and the call went out


def test_a_server_that_closes_leaves_the_call_unanswered() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        connection, peer = _connect(server)
        peer.close()
        with pytest.raises(Unanswered):
            connection.exchange(b"", MESSAGE, 5.0)
        assert not connection.usable


def test_no_server_cannot_connect() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    with pytest.raises(OSError):  # noqa: PT011  (refused: FastPath turns it into the loop's path)
        BlockingConnection(f"127.0.0.1:{port}", "127.0.0.1", port, 5.0)


@pytest.mark.parametrize(
    ("status", "error", "code"),
    [(b"503", UnavailableError, GrpcCode.UNAVAILABLE), (b"404", ServerError, GrpcCode.UNKNOWN)],
)
def test_an_http_answer_that_is_not_grpc_is_the_calls_error(
    status: bytes, error: type[ServerError], code: GrpcCode
) -> None:
    """A proxy's (or any non-gRPC server's) HTTP error: a 502/503/504 is UNAVAILABLE (retried
    elsewhere), anything else UNKNOWN, each naming the status; the connection stays usable."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        connection, peer = _connect(server)
        with peer:
            answer = encode_headers([(b":status", status), (b"content-type", b"text/plain")])
            headers = frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, answer)
            peer.sendall(settings_frame({}) + headers)
            with pytest.raises(
                error, match=f"HTTP status {status.decode()} instead of a gRPC response"
            ) as caught:
                connection.exchange(b"", MESSAGE, 5.0)
            assert type(caught.value) is error
            assert caught.value.status is code
            assert connection.usable
            connection.close()
