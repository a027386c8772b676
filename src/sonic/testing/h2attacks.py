"""The published HTTP/2, gRPC and HTTP/REST denial-of-service attacks, and a bystander client to watch them.

Each attack is a function of the server's address that runs the attack from its own sockets and
returns what the server answered (a GOAWAY code, a gRPC status, bytes it accepted), so the tests
(tests/integration/h2) assert the reaction and ``benchmarks/h2_attacks.py`` measures the cost: both
run the same attacks. The :class:`Bystander` is a well-behaved tritonclient.grpc client that calls the
server back to back while an attack runs, timing every call.
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Self, TypeVar

import hpack
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from sonic.h2.frames import (
    ErrorCode,
    Flag,
    FrameType,
    Setting,
    frame,
    rst_stream,
    settings_frame,
    window_update,
)
from sonic.testing.h2peer import ConnectionEnded, RawH2, data_frame, grpc_headers, grpc_message

T = TypeVar("T")
MiB = 1 << 20
# The attacker's socket timeout: long, so a server that stalls still gets the whole attack (and the
# bystander's deadline, not the attacker's, is what tells).
ATTACK_TIMEOUT_S = 60.0
INFER_PATH = "/v2/models/identity/infer"


class Bystander:
    """A real tritonclient.grpc client inferring on ``identity``; it times every call."""

    def __init__(self, address: str, timeout_s: float) -> None:
        self.client = grpcclient.InferenceServerClient(address)
        self.timeout_s = timeout_s
        self.input = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        self.input.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
        self.worst_s = 0.0
        self.calls = 0

    def call(self) -> None:
        """One call; AssertionError if it is not answered (right) within ``timeout_s``."""
        start = time.perf_counter()
        try:
            result = self.client.infer("identity", [self.input], client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            self.worst_s = max(self.worst_s, time.perf_counter() - start)
            msg = f"the well-behaved client's call #{self.calls + 1} failed: {exc}"
            raise AssertionError(msg) from None
        self.worst_s = max(self.worst_s, time.perf_counter() - start)
        assert result.as_numpy("OUTPUT0").tolist() == [list(range(16))]
        self.calls += 1

    def during(self, attack: Callable[[], T]) -> T:
        """Run ``attack`` in a thread; call the server back to back until it is over, then once more."""
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(attack)
            while not future.done():
                self.call()
            self.call()
            return future.result()

    def close(self) -> None:
        self.client.close()


# --- HTTP/2 and gRPC ------------------------------------------------------------------------------------


def hpack_size_updates(address: str, *, continuation: bool) -> int | None:
    """12 header blocks of 1 MiB made only of dynamic-table-size updates; the GOAWAY code (None: closed)."""
    updates = b"\x20" * (MiB - 1)  # each byte: "dynamic table size is now 0"
    with RawH2(address, timeout_s=ATTACK_TIMEOUT_S) as peer:
        for index in range(12):
            stream_id = 2 * index + 1
            if continuation:
                pieces = [updates[i : i + 16384] for i in range(0, len(updates), 16384)]
                frames = [frame(FrameType.HEADERS, 0, stream_id, pieces[0])]
                frames += [frame(FrameType.CONTINUATION, 0, stream_id, p) for p in pieces[1:-1]]
                frames.append(frame(FrameType.CONTINUATION, Flag.END_HEADERS, stream_id, pieces[-1]))
            else:
                frames = [frame(FrameType.HEADERS, Flag.END_HEADERS, stream_id, updates)]
            if not peer.send(*frames):
                break
        return peer.connection_error()


def continuation_flood(address: str, payload: bytes, total_bytes: int = 16 * MiB) -> tuple[int, int | None]:
    """HEADERS without END_HEADERS, then CONTINUATION frames of ``payload`` without end.

    Returns the bytes the server accepted and its GOAWAY code (None: closed without one).
    """
    with RawH2(address, timeout_s=ATTACK_TIMEOUT_S) as peer:
        peer.send(peer.headers(1, end_headers=False))
        sent = peer.flood(frame(FrameType.CONTINUATION, 0, 1, payload), total_bytes)
        return sent, peer.connection_error()


def header_memo(address: str, hold: Callable[[], None], connections: int = 8) -> None:
    """256 distinct 32 KB header blocks that leave the HPACK table alone, per connection.

    ``hold`` is called while every connection is still open (whatever they cost is still held).
    """
    peers = [RawH2(address, timeout_s=ATTACK_TIMEOUT_S) for _ in range(connections)]
    try:
        for number, peer in enumerate(peers):
            for batch in range(0, 256, 32):  # calls in flight at once, within any stream limit
                streams = [2 * index + 1 for index in range(batch, batch + 32)]
                frames = []
                for stream_id in streams:
                    padding = hpack.NeverIndexedHeaderTuple("x-pad", f"{number}.{stream_id}." + "p" * 32000)
                    block = peer.block([*grpc_headers(), padding])
                    frames += [
                        frame(FrameType.HEADERS, Flag.END_HEADERS, stream_id, block),
                        data_frame(stream_id, grpc_message(), end_stream=True),
                    ]
                peer.send(*frames)
                for stream_id in streams:
                    peer.grpc_status(stream_id)
        hold()
    finally:
        for peer in peers:
            peer.close()


def rapid_reset(address: str, streams: int = 20_000) -> int | None:
    """Streams opened and reset at once (CVE-2023-44487); the GOAWAY code (None: closed)."""
    with RawH2(address, timeout_s=ATTACK_TIMEOUT_S) as peer:
        for start in range(0, streams, 500):
            frames = []
            for index in range(start, min(start + 500, streams)):
                stream_id = 2 * index + 1
                frames += [peer.headers(stream_id), rst_stream(stream_id, ErrorCode.CANCEL)]
            if not peer.send(*frames):
                break
        return peer.connection_error()


def zero_window_burst(address: str, calls: int = 5000) -> None:
    """``calls`` calls parked on a zero window, then 110 KiB of WINDOW_UPDATE and SETTINGS frames."""
    with RawH2(address, timeout_s=ATTACK_TIMEOUT_S, settings={Setting.INITIAL_WINDOW_SIZE: 0}) as peer:
        frames = [peer.call(2 * index + 1) for index in range(calls)]
        for start in range(0, len(frames), 500):
            if not peer.send(*frames[start : start + 500]):
                return
        peer.send((window_update(0, 1) + settings_frame({Setting.INITIAL_WINDOW_SIZE: 0})) * 5000)


SETTINGS_UNIT = frame(FrameType.SETTINGS, 0, 0)
PING_UNIT = frame(FrameType.PING, 0, 0, b"12345678")


def ack_flood(address: str, unit: bytes, total_bytes: int = 64 * MiB) -> int:
    """Frames that each ask for an ACK (SETTINGS, PING), never reading; the bytes the server accepted."""
    with RawH2(address, timeout_s=ATTACK_TIMEOUT_S) as peer:
        return peer.flood(unit, total_bytes)


def grpc_gzip_bomb(address: str, bomb: bytes) -> tuple[int, str]:
    """ModelInfer with ``bomb`` as a gzip-compressed message; the call's gRPC status and message."""
    with RawH2(address, timeout_s=ATTACK_TIMEOUT_S) as peer:
        headers = grpc_headers("ModelInfer", grpc_encoding="gzip")
        peer.send(
            peer.headers(1, headers), data_frame(1, grpc_message(bomb, compressed=True), end_stream=True)
        )
        return peer.grpc_status(1)


# --- HTTP/REST ------------------------------------------------------------------------------------------


def http_post(address: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """POST to identity's infer endpoint; the status and the ``error`` of the reply."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=ATTACK_TIMEOUT_S)
    try:
        connection.request(
            "POST", INFER_PATH, body=body, headers={"Content-Type": "application/json", **(headers or {})}
        )
        response = connection.getresponse()
        return response.status, str(json.loads(response.read()).get("error", ""))
    finally:
        connection.close()


def http_deep_json(address: str, depth: int = 100_000) -> tuple[int, str]:
    return http_post(address, b'{"inputs": ' + b"[" * depth + b"]" * depth + b"}")


def http_content_length(address: str, length: int = 3 << 30) -> bytes:
    """Headers announcing ``length`` bytes and no body; everything the server sent until it closed."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=ATTACK_TIMEOUT_S) as sock:
        sock.sendall(
            f"POST {INFER_PATH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n".encode()
        )
        received = b""
        while chunk := sock.recv(65536):  # until the server closes: it must, without the body
            received += chunk
        return received


def http_gzip_bomb(address: str, bomb: bytes) -> tuple[int, str]:
    return http_post(address, bomb, {"Content-Encoding": "gzip"})


# --- slow large uploads (the request-buffer budget) --------------------------------------------------


def http_slow_uploads(
    address: str, uploads: int, announced: int, offered: int, stall_s: float = 2.0
) -> Uploads:
    """``uploads`` HTTP/1.1 connections, each announcing ``announced`` bytes of body and sending up to
    ``offered`` of them, all at once, until the server stops reading one for ``stall_s``. The sockets stay
    open (the bodies unfinished) until the returned :class:`Uploads` is closed."""
    host, port = address.rsplit(":", 1)
    head = (
        f"POST {INFER_PATH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {announced}\r\n\r\n"
    ).encode()
    socks = [socket.create_connection((host, int(port)), timeout=stall_s) for _ in range(uploads)]
    chunk = b" " * MiB

    def push(sock: socket.socket) -> int:
        sock.sendall(head)
        sent = 0
        try:
            while sent < offered:
                sock.sendall(chunk)
                sent += len(chunk)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            pass
        return sent

    with ThreadPoolExecutor(uploads) as pool:
        sent = list(pool.map(push, socks))
    return Uploads(sent, socks)


def grpc_slow_uploads(
    address: str, connections: int, streams: int, message_bytes: int, stall_s: float = 2.0
) -> Uploads:
    """``connections`` HTTP/2 connections with ``streams`` ModelInfer calls each, announcing a message of
    ``message_bytes`` and sending exactly its bytes as fast as the server's flow control allows, never
    ending the stream; then reading until the server is silent for ``stall_s``. The calls stay open
    until :class:`Uploads` closes; the statuses of calls the server ended meanwhile are recorded."""
    peers = [RawH2(address, timeout_s=stall_s) for _ in range(connections)]
    statuses: dict[tuple[int, int], tuple[int, str]] = {}  # (connection, stream) -> its gRPC status

    def push(index_peer: tuple[int, RawH2]) -> int:
        number, peer = index_peer
        window = 65_535  # the connection window; the server's stream windows are larger than it

        def read() -> None:
            nonlocal window
            received = peer.read_frame()
            if received.type == FrameType.WINDOW_UPDATE and received.stream_id == 0:
                window += struct.unpack(">I", received.payload)[0] & 0x7FFFFFFF
            elif received.type == FrameType.HEADERS:  # decoded in order: HPACK keeps state
                fields = {str(k): str(v) for k, v in peer.decoder.decode(received.payload)}
                if "grpc-status" in fields:
                    status = (int(fields["grpc-status"]), fields.get("grpc-message", ""))
                    statuses[number, received.stream_id] = status
            elif received.type == FrameType.GOAWAY:
                raise ConnectionEnded(str(received))

        for index in range(streams):
            prefix = b"\0" + struct.pack(">I", message_bytes)  # uncompressed, this long
            call = peer.headers(2 * index + 1, grpc_headers("ModelInfer"))
            peer.send(call, data_frame(2 * index + 1, prefix))
            window -= len(prefix)
        left = [message_bytes] * streams
        sent, turn = 0, 0
        try:
            while any(left):
                while window < min(1 << 14, left[turn]):
                    read()
                frames: list[bytes] = []
                while window and left[turn] and len(frames) < 64:
                    size = min(1 << 14, left[turn], window)
                    frames.append(data_frame(2 * turn + 1, bytes(size)))
                    window -= size
                    left[turn] -= size
                    sent += size
                peer.send(*frames)
                turn = (turn + 1) % streams
                while not left[turn] and any(left):
                    turn = (turn + 1) % streams
            while True:  # the server's answers, until it is silent
                read()
        except (TimeoutError, ConnectionEnded, BrokenPipeError, ConnectionResetError):
            pass
        return sent

    with ThreadPoolExecutor(connections) as pool:
        sent = list(pool.map(push, enumerate(peers)))
    return Uploads(sent, [peer.sock for peer in peers], statuses)


class Uploads:
    """Unfinished uploads: the bytes each connection got in, and its socket (closed by :meth:`close`)."""

    def __init__(
        self,
        sent: list[int],
        socks: list[socket.socket],
        grpc_statuses: dict[tuple[int, int], tuple[int, str]] | None = None,
    ) -> None:
        self.sent = sent
        self._socks = socks
        self.grpc_statuses = grpc_statuses or {}  # calls the server ended while they were sent

    def http_answers(self, timeout_s: float = 1.0) -> list[bytes]:
        """What the server sent on each HTTP connection until it closed it (or ``timeout_s`` of silence)."""
        answers = []
        for sock in self._socks:
            sock.settimeout(timeout_s)
            received = b""
            try:
                while chunk := sock.recv(65536):
                    received += chunk
            except (TimeoutError, ConnectionResetError):
                pass
            answers.append(received)
        return answers

    def close(self) -> None:
        for sock in self._socks:
            sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
