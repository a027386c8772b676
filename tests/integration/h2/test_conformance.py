"""RFC 9113 / RFC 7541 conformance of the native gRPC port, case by case after h2spec's list.

Every h2spec case (``http2`` and ``hpack`` sections, ids kept) that applies to a gRPC server, sent from a
raw socket; each asserts the reaction the RFC requires. As in h2spec, a connection error is a GOAWAY
with the code or the connection closed, and a stream error is an RST_STREAM with the code or a
connection error with it. Left out: cases about server push and about responses to GET/HEAD (a gRPC
server answers POST only), and the priority scheme RFC 9113 deprecated (PRIORITY frames are only
checked for their framing).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from sonic.h2.frames import PREFACE, ErrorCode, Flag, FrameType, Setting, frame, rst_stream, window_update
from sonic.launch import ServerProcess
from sonic.testing.h2peer import ConnectionEnded, RawH2, data_frame, grpc_headers, grpc_message

E = ErrorCode
T = FrameType
PING = frame(T.PING, 0, 0, b"conform!")


@dataclass(frozen=True)
class Case:
    id: str
    send: Callable[[RawH2], list[bytes]]
    kind: str  # "connection", "stream", "ok" (still serving) or "response" (stream 1 answered)
    codes: frozenset[ErrorCode] = frozenset()
    handshake: bool = True


def conn(
    case_id: str, send: Callable[[RawH2], list[bytes]], *codes: ErrorCode, handshake: bool = True
) -> Case:
    return Case(case_id, send, "connection", frozenset(codes), handshake)


def stream(case_id: str, send: Callable[[RawH2], list[bytes]], *codes: ErrorCode) -> Case:
    return Case(case_id, send, "stream", frozenset(codes))


def ok(case_id: str, send: Callable[[RawH2], list[bytes]]) -> Case:
    return Case(case_id, send, "ok")


def answered(case_id: str, send: Callable[[RawH2], list[bytes]]) -> Case:
    return Case(case_id, send, "response")


# --- frame builders -------------------------------------------------------------------------------------


def call(p: RawH2, sid: int = 1) -> list[bytes]:
    return [p.call(sid)]


def open_stream(p: RawH2, sid: int = 1) -> bytes:
    """HEADERS without END_STREAM: the stream is open, waiting for its request message."""
    return p.headers(sid)


def split_headers(p: RawH2, sid: int = 1, pieces: int = 3) -> list[bytes]:
    block = p.block(grpc_headers())
    size = -(-len(block) // pieces)
    parts = [block[i : i + size] for i in range(0, len(block), size)]
    frames = [frame(T.HEADERS, 0, sid, parts[0])]
    frames += [frame(T.CONTINUATION, 0, sid, part) for part in parts[1:-1]]
    return [*frames, frame(T.CONTINUATION, Flag.END_HEADERS, sid, parts[-1])]


def settings(*pairs: tuple[int, int], flags: int = 0, sid: int = 0) -> bytes:
    return frame(T.SETTINGS, flags, sid, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def request_with(*fields: tuple[str, str], drop: str = "") -> Callable[[RawH2], list[bytes]]:
    """A request whose header list is the gRPC one without ``drop`` and with ``fields`` added."""

    def send(p: RawH2) -> list[bytes]:
        headers = [(n, v) for n, v in grpc_headers() if n != drop]
        regular = [(n, v) for n, v in fields if not n.startswith(":")]
        pseudo = [(n, v) for n, v in fields if n.startswith(":")]
        block = p.block(pseudo + headers + regular)
        return [frame(T.HEADERS, Flag.END_HEADERS, 1, block), data_frame(1, grpc_message(), end_stream=True)]

    return send


def raw_block(block: bytes) -> Callable[[RawH2], list[bytes]]:
    return lambda _p: [frame(T.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, block)]


def closed_by_reset(p: RawH2) -> list[bytes]:
    return [open_stream(p), rst_stream(1, E.CANCEL)]


def max_frame(p: RawH2) -> int:
    """The server's SETTINGS_MAX_FRAME_SIZE (2^14 unless it said otherwise)."""
    return p.server_settings.get(Setting.MAX_FRAME_SIZE, 16384)


CASES = [
    # 3.5 HTTP/2 Connection Preface
    ok("3.5/1", lambda _p: []),
    conn("3.5/2", lambda _p: [b"INVALID CONNECTION PREFACE\r\n\r\n"], E.PROTOCOL_ERROR, handshake=False),
    # 4.1 Frame Format
    ok("4.1/1", lambda _p: [frame(0x16, 0, 0, b"\x00" * 8)]),
    ok("4.1/2", lambda _p: [frame(T.PING, 0x16, 0, b"\x00" * 8)]),
    ok("4.1/3", lambda _p: [frame(T.PING, 0, 0x80000000, b"\x00" * 8)]),
    # 4.2 Frame Size
    answered(
        "4.2/1",
        lambda p: [open_stream(p), data_frame(1, grpc_message(b"\x00" * (16384 - 5)), end_stream=True)],
    ),
    stream(
        "4.2/2", lambda p: [open_stream(p), data_frame(1, b"\x00" * (max_frame(p) + 1))], E.FRAME_SIZE_ERROR
    ),
    conn(
        "4.2/3",
        lambda p: [frame(T.HEADERS, Flag.END_HEADERS, 1, p.block(grpc_headers(x_big="x" * max_frame(p))))],
        E.FRAME_SIZE_ERROR,
    ),
    # 4.3 Header Compression and Decompression
    conn("4.3/1", raw_block(b"\x00\x85\xf2\xb2\x4a\x84\xff\x84\x49\x50\x9f\xff"), E.COMPRESSION_ERROR),
    conn(
        "4.3/2",
        lambda p: [split_headers(p)[0], frame(T.PRIORITY, 0, 1, b"\x00\x00\x00\x00\x10")],
        E.PROTOCOL_ERROR,
    ),
    conn(
        "4.3/3",
        lambda p: [split_headers(p)[0], frame(T.HEADERS, Flag.END_HEADERS, 3, p.block(grpc_headers()))],
        E.PROTOCOL_ERROR,
    ),
    # 5.1 Stream States
    conn("5.1/1", lambda _p: [data_frame(1, b"x")], E.PROTOCOL_ERROR),
    conn("5.1/2", lambda _p: [rst_stream(1, E.CANCEL)], E.PROTOCOL_ERROR),
    conn("5.1/3", lambda _p: [window_update(1, 100)], E.PROTOCOL_ERROR),
    conn("5.1/4", lambda _p: [frame(T.CONTINUATION, Flag.END_HEADERS, 1, b"\x82")], E.PROTOCOL_ERROR),
    stream("5.1/5", lambda p: [p.headers(1, end_stream=True), data_frame(1, b"x")], E.STREAM_CLOSED),
    stream(
        "5.1/6", lambda p: [p.headers(1, end_stream=True), p.headers(1, end_stream=True)], E.STREAM_CLOSED
    ),
    conn(
        "5.1/7",
        lambda p: [p.headers(1, end_stream=True), frame(T.CONTINUATION, Flag.END_HEADERS, 1, b"\x82")],
        E.STREAM_CLOSED,
        E.PROTOCOL_ERROR,
    ),
    stream("5.1/8", lambda p: [*closed_by_reset(p), data_frame(1, b"x")], E.STREAM_CLOSED),
    stream("5.1/9", lambda p: [*closed_by_reset(p), p.headers(1, end_stream=True)], E.STREAM_CLOSED),
    conn(
        "5.1/10",
        lambda p: [*closed_by_reset(p), frame(T.CONTINUATION, Flag.END_HEADERS, 1, b"\x82")],
        E.STREAM_CLOSED,
        E.PROTOCOL_ERROR,
    ),
    # 5.1.1 Stream Identifiers
    conn("5.1.1/1", lambda p: [p.headers(2, end_stream=True)], E.PROTOCOL_ERROR),
    conn("5.1.1/2", lambda p: [p.call(5), p.call(3)], E.PROTOCOL_ERROR),
    # 5.4.1 Connection Error Handling
    conn("5.4.1/1", lambda _p: [frame(T.PING, 0, 0, b"\x00" * 7)], E.FRAME_SIZE_ERROR),
    # 6.1 DATA
    conn("6.1/1", lambda _p: [data_frame(0, b"x")], E.PROTOCOL_ERROR),
    stream("6.1/2", lambda p: [p.headers(1, end_stream=True), data_frame(1, b"x")], E.STREAM_CLOSED),
    conn("6.1/3", lambda p: [open_stream(p), frame(T.DATA, Flag.PADDED, 1, b"\x08test")], E.PROTOCOL_ERROR),
    # 6.2 HEADERS
    conn(
        "6.2/1",
        lambda p: [split_headers(p)[0], frame(T.PRIORITY, 0, 1, b"\x00\x00\x00\x00\x10")],
        E.PROTOCOL_ERROR,
    ),
    conn(
        "6.2/2",
        lambda p: [split_headers(p)[0], frame(T.HEADERS, Flag.END_HEADERS, 3, p.block(grpc_headers()))],
        E.PROTOCOL_ERROR,
    ),
    conn(
        "6.2/3", lambda p: [frame(T.HEADERS, Flag.END_HEADERS, 0, p.block(grpc_headers()))], E.PROTOCOL_ERROR
    ),
    conn(
        "6.2/4",
        lambda p: [frame(T.HEADERS, Flag.END_HEADERS | Flag.PADDED, 1, b"\xff" + p.block(grpc_headers()))],
        E.PROTOCOL_ERROR,
    ),
    # 6.3 PRIORITY
    conn("6.3/1", lambda _p: [frame(T.PRIORITY, 0, 0, b"\x00\x00\x00\x00\x10")], E.PROTOCOL_ERROR),
    stream(
        "6.3/2", lambda p: [open_stream(p), frame(T.PRIORITY, 0, 1, b"\x00\x00\x00\x00")], E.FRAME_SIZE_ERROR
    ),
    # 6.4 RST_STREAM
    conn("6.4/1", lambda _p: [rst_stream(0, E.CANCEL)], E.PROTOCOL_ERROR),
    conn("6.4/2", lambda _p: [rst_stream(1, E.CANCEL)], E.PROTOCOL_ERROR),
    conn("6.4/3", lambda p: [open_stream(p), frame(T.RST_STREAM, 0, 1, b"\x00\x00\x08")], E.FRAME_SIZE_ERROR),
    # 6.5 SETTINGS
    conn("6.5/1", lambda _p: [frame(T.SETTINGS, Flag.ACK, 0, b"\x00")], E.FRAME_SIZE_ERROR),
    conn("6.5/2", lambda _p: [settings((Setting.ENABLE_PUSH, 0), sid=1)], E.PROTOCOL_ERROR),
    conn("6.5/3", lambda _p: [frame(T.SETTINGS, 0, 0, b"\x00\x03\x00")], E.FRAME_SIZE_ERROR),
    # 6.5.2 Defined SETTINGS Parameters
    conn("6.5.2/1", lambda _p: [settings((Setting.ENABLE_PUSH, 2))], E.PROTOCOL_ERROR),
    conn("6.5.2/2", lambda _p: [settings((Setting.INITIAL_WINDOW_SIZE, 1 << 31))], E.FLOW_CONTROL_ERROR),
    conn("6.5.2/3", lambda _p: [settings((Setting.MAX_FRAME_SIZE, 16383))], E.PROTOCOL_ERROR),
    conn("6.5.2/4", lambda _p: [settings((Setting.MAX_FRAME_SIZE, 1 << 24))], E.PROTOCOL_ERROR),
    ok("6.5.2/5", lambda _p: [settings((0xFF, 1))]),
    # 6.5.3 Settings Synchronization (the ACK is checked in the case itself)
    ok("6.5.3/2", lambda _p: [settings((Setting.INITIAL_WINDOW_SIZE, 100))]),
    # 6.7 PING (6.7/1 and 6.7/2 are the "ok" check itself: an ACK with our payload, none for an ACK)
    ok("6.7/2", lambda _p: [frame(T.PING, Flag.ACK, 0, b"unsolici")]),
    conn("6.7/3", lambda _p: [frame(T.PING, 0, 1, b"\x00" * 8)], E.PROTOCOL_ERROR),
    conn("6.7/4", lambda _p: [frame(T.PING, 0, 0, b"\x00" * 6)], E.FRAME_SIZE_ERROR),
    # 6.8 GOAWAY
    conn("6.8/1", lambda _p: [frame(T.GOAWAY, 0, 1, b"\x00" * 8)], E.PROTOCOL_ERROR),
    # 6.9 WINDOW_UPDATE
    conn("6.9/1", lambda _p: [window_update(0, 0)], E.PROTOCOL_ERROR),
    stream("6.9/2", lambda p: [open_stream(p), window_update(1, 0)], E.PROTOCOL_ERROR),
    conn("6.9/3", lambda _p: [frame(T.WINDOW_UPDATE, 0, 0, b"\x00\x00\x01")], E.FRAME_SIZE_ERROR),
    # 6.9.1 The Flow-Control Window
    conn(
        "6.9.1/2",
        lambda _p: [window_update(0, (1 << 31) - 1), window_update(0, (1 << 31) - 1)],
        E.FLOW_CONTROL_ERROR,
    ),
    stream(
        "6.9.1/3",
        lambda p: [open_stream(p), window_update(1, (1 << 31) - 1), window_update(1, (1 << 31) - 1)],
        E.FLOW_CONTROL_ERROR,
    ),
    # 6.9.2 Initial Flow-Control Window Size
    conn("6.9.2/3", lambda _p: [settings((Setting.INITIAL_WINDOW_SIZE, 1 << 31))], E.FLOW_CONTROL_ERROR),
    # 6.10 CONTINUATION
    answered("6.10/1", lambda p: [*split_headers(p), data_frame(1, grpc_message(), end_stream=True)]),
    conn("6.10/2", lambda p: [*split_headers(p)[:2], data_frame(1, b"x")], E.PROTOCOL_ERROR),
    conn(
        "6.10/3",
        lambda p: [split_headers(p)[0], frame(T.CONTINUATION, Flag.END_HEADERS, 0, b"\x82")],
        E.PROTOCOL_ERROR,
    ),
    conn(
        "6.10/4",
        lambda p: [open_stream(p), frame(T.CONTINUATION, Flag.END_HEADERS, 1, b"\x82")],
        E.PROTOCOL_ERROR,
    ),
    conn(
        "6.10/5",
        lambda p: [*split_headers(p), frame(T.CONTINUATION, Flag.END_HEADERS, 1, b"\x82")],
        E.PROTOCOL_ERROR,
    ),
    conn(
        "6.10/6",
        lambda p: [open_stream(p), data_frame(1, b"x"), frame(T.CONTINUATION, Flag.END_HEADERS, 1, b"\x82")],
        E.PROTOCOL_ERROR,
    ),
    # 8.1 HTTP Request/Response Exchange
    stream("8.1/1", lambda p: [open_stream(p), p.headers(1)], E.PROTOCOL_ERROR),
    # 8.1.2 HTTP Header Fields (RFC 9113 8.2, 8.3)
    stream("8.1.2/1", request_with(("X-Upper", "1")), E.PROTOCOL_ERROR),
    stream("8.1.2.1/1", request_with((":unknown", "1")), E.PROTOCOL_ERROR),
    stream("8.1.2.1/2", request_with((":status", "200")), E.PROTOCOL_ERROR),
    stream("8.1.2.1/3", request_with(("x-regular", "1"), (":x-late", "1")), E.PROTOCOL_ERROR),
    stream("8.1.2.1/4", request_with((":method", "POST")), E.PROTOCOL_ERROR),
    stream("8.1.2.2/1", request_with(("connection", "keep-alive")), E.PROTOCOL_ERROR),
    stream("8.1.2.2/2", request_with(("te", "gzip")), E.PROTOCOL_ERROR),
    stream("8.1.2.3/1", request_with((":path", ""), drop=":path"), E.PROTOCOL_ERROR),
    stream("8.1.2.3/2", request_with(drop=":method"), E.PROTOCOL_ERROR),
    stream("8.1.2.3/3", request_with(drop=":scheme"), E.PROTOCOL_ERROR),
    stream("8.1.2.3/4", request_with(drop=":path"), E.PROTOCOL_ERROR),
    # 8.2 Server Push: a client must not push
    conn(
        "8.2/1",
        lambda p: [open_stream(p), frame(T.PUSH_PROMISE, Flag.END_HEADERS, 1, b"\x00\x00\x00\x02\x82")],
        E.PROTOCOL_ERROR,
    ),
    # RFC 7541 (h2spec "hpack")
    conn("hpack/2.3.3/1", raw_block(b"\xff\xe9\x06"), E.COMPRESSION_ERROR),  # indexed field, index 1000
    conn("hpack/2.3.3/2", raw_block(b"\x0f\xd9\x07\x01a"), E.COMPRESSION_ERROR),  # literal, name index 1000
    conn("hpack/4.2/1", raw_block(b"\x3f\xe1\xff\x03"), E.COMPRESSION_ERROR),  # table size 65536 > 4096
    conn("hpack/5.2/1", raw_block(b"\x00\x01a\x84\xff\xff\xff\xff"), E.COMPRESSION_ERROR),  # Huffman EOS
    conn("hpack/5.2/2", raw_block(b"\x00\x01a\x82\x1f\xff"), E.COMPRESSION_ERROR),  # padding over 7 bits
    conn("hpack/5.2/3", raw_block(b"\x00\x01a\x81\x18"), E.COMPRESSION_ERROR),  # padding of zeros
    conn("hpack/6.3/1", raw_block(b"\x82\x20"), E.COMPRESSION_ERROR),  # table size update after a field
]


def _check(peer: RawH2, case: Case) -> None:
    if case.kind == "ok":
        peer.send(PING)
        while (ack := peer.wait_for(T.PING)).payload != PING[9:]:
            assert ack.payload != b"unsolici", "the server answered a PING ACK (6.7: it must not)"
        assert ack.flags & Flag.ACK, f"a PING, not its ACK: {ack}"
        assert not any(f.type == T.GOAWAY for f in peer.received), peer.received
    elif case.kind == "response":
        peer.grpc_status(1)  # a response with a status (h2spec asks for the HEADERS), whatever it is
    elif case.kind == "connection":
        code = peer.connection_error()
        assert code is None or code in case.codes, f"GOAWAY {E(code).name}, expected {sorted(case.codes)}"
    else:
        kind, code = peer.reaction(1)
        assert kind != "closed" or not case.codes, "closed without RST_STREAM or GOAWAY"
        assert code is None or code in case.codes, f"{kind} {E(code).name}, expected {sorted(case.codes)}"


PARAMS = [pytest.param(case, id=case.id) for case in CASES]


@pytest.mark.parametrize("case", PARAMS)
def test_h2spec_case(h2_server: ServerProcess, case: Case) -> None:
    with RawH2(h2_server.grpc_address, handshake=case.handshake, timeout_s=3.0) as peer:
        if not peer.send(*case.send(peer)):
            # Refused while we were still writing: only right for an error case; the reaction must follow.
            assert case.kind in {"connection", "stream"}, f"the server closed the connection on {case.id}"
        try:
            _check(peer, case)
        except ConnectionEnded:
            assert case.kind in {"connection", "stream"}, f"the server closed the connection on {case.id}"


def test_preface_then_settings_first(h2_server: ServerProcess) -> None:
    """3.5/1 in detail: the server's first frame is SETTINGS, and it ACKs ours."""
    with RawH2(h2_server.grpc_address, handshake=False) as peer:
        peer.send(PREFACE, settings())
        assert peer.read_frame().type == T.SETTINGS
        ack = peer.wait_for(T.SETTINGS)
        while not ack.flags & Flag.ACK:
            ack = peer.wait_for(T.SETTINGS)
        assert ack.payload == b""


def _header_list_frames(peer: RawH2, size_bytes: int) -> list[bytes]:
    """One header block of ``size_bytes`` (a single huge header), cut into HEADERS and CONTINUATIONs."""
    block = peer.block([*grpc_headers(), ("x-big", "a" * size_bytes)])
    pieces = [block[i : i + 16384] for i in range(0, len(block), 16384)]
    frames = [frame(T.HEADERS, Flag.END_HEADERS if len(pieces) == 1 else 0, 1, pieces[0])]
    frames += [frame(T.CONTINUATION, 0, 1, p) for p in pieces[1:-1]]
    if len(pieces) > 1:
        frames.append(frame(T.CONTINUATION, Flag.END_HEADERS, 1, pieces[-1]))
    return frames


@pytest.mark.parametrize("size_bytes", [1 << 20, 3 << 20], ids=["1MiB", "3MiB"])
def test_a_connection_ended_for_abuse_lets_the_peer_read_the_goaway(
    h2_server: ServerProcess, size_bytes: int
) -> None:
    # The server ends the connection while the rest of the header list is still arriving: it must
    # shut down writing and drain what comes for a while (a lingering close), not close with unread
    # bytes in its socket, which makes the kernel send a reset that destroys the GOAWAY in flight.
    with RawH2(h2_server.grpc_address) as peer:
        sent_all = peer.send(*_header_list_frames(peer, size_bytes))
        code = peer.connection_error()
    assert sent_all, "the server reset the connection while the header list was arriving"
    assert code is not None, "the connection ended without a GOAWAY the peer could read"
    assert code in {E.ENHANCE_YOUR_CALM, E.PROTOCOL_ERROR, E.COMPRESSION_ERROR}, E(code).name
