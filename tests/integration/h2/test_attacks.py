"""One test per published HTTP/2 and gRPC denial-of-service class, against a real `sonic serve`.

Each attack runs from a raw HTTP/2 peer while a second, well-behaved client (tritonclient.grpc) keeps
calling: every one of its calls must be answered within CALL_BOUND_S, and the server's resident memory
may grow by at most a bound. Where RFC 9113 or common practice names the reaction (GOAWAY with a code,
RST_STREAM), the test asserts that too.
"""

from __future__ import annotations

import re

import hpack
import pytest

from sonic.launch import ServerProcess
from sonic.protocol.http2 import (
    ErrorCode,
    Flag,
    FrameType,
    Setting,
    frame,
    rst_stream,
    settings_frame,
    window_update,
)
from sonic.testing.bomb import gzip_zeros
from sonic.testing.h2peer import RawH2, data_frame, grpc_headers, grpc_message

from .conftest import Bystander, rss_bytes

MiB = 1 << 20
# The bomb inflates to 1 GiB; the server may inflate up to its default cap (256 MiB), not much more.
BOMB_RSS_BOUND = 384 * MiB
RSS_BOUND = 64 * MiB
CALM = {
    ErrorCode.ENHANCE_YOUR_CALM,
    ErrorCode.PROTOCOL_ERROR,
    ErrorCode.COMPRESSION_ERROR,
    ErrorCode.FRAME_SIZE_ERROR,
}


def _assert_rss(process: ServerProcess, before: int, bound: int = RSS_BOUND) -> None:
    grown = rss_bytes(process.pid) - before
    assert grown < bound, f"server RSS grew by {grown / MiB:.0f} MiB (bound {bound / MiB:.0f} MiB)"


def _assert_connection_error(peer: RawH2, codes: set[ErrorCode] = CALM) -> None:
    """The server ends the attacking connection: GOAWAY with one of ``codes``, or a plain close."""
    code = peer.connection_error()
    assert code is None or code in codes, f"GOAWAY {ErrorCode(code).name}, expected one of {sorted(codes)}"


# --- HPACK and header blocks ------------------------------------------------------------------------------


@pytest.mark.parametrize("continuation", [False, True], ids=["headers", "continuation"])
def test_hpack_table_size_update_flood(
    attacked: ServerProcess, bystander: Bystander, continuation: bool
) -> None:
    """Header blocks of nothing but dynamic-table-size updates (1 MiB each, 12 of them)."""
    before = rss_bytes(attacked.pid)
    updates = b"\x20" * (MiB - 1)  # each byte: "dynamic table size is now 0"

    def attack() -> None:
        with RawH2(attacked.grpc_address) as peer:
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
            _assert_connection_error(peer)

    bystander.during(attack)
    _assert_rss(attacked, before)


@pytest.mark.parametrize("payload", [b"", b"\x00" * 16384], ids=["empty", "16KiB"])
def test_continuation_flood(attacked: ServerProcess, bystander: Bystander, payload: bytes) -> None:
    """HEADERS without END_HEADERS, then CONTINUATION frames without end (CVE-2024-27316 family)."""
    before = rss_bytes(attacked.pid)

    def attack() -> int:
        with RawH2(attacked.grpc_address) as peer:
            peer.send(peer.headers(1, end_headers=False))
            sent = peer.flood(frame(FrameType.CONTINUATION, 0, 1, payload), 16 * MiB)
            _assert_connection_error(peer)
            return sent

    sent = bystander.during(attack)
    assert sent < 16 * MiB, "the server read 16 MiB of CONTINUATION frames of one header block"
    _assert_rss(attacked, before)


def test_header_memo_growth_across_connections(attacked: ServerProcess, bystander: Bystander) -> None:
    """Distinct large header blocks that leave the HPACK table alone, 256 per connection, 8 connections."""
    before = rss_bytes(attacked.pid)

    def attack() -> None:
        peers = [RawH2(attacked.grpc_address) for _ in range(8)]
        try:
            for number, peer in enumerate(peers):
                for batch in range(0, 256, 32):  # calls in flight at once, within any stream limit
                    streams = [2 * index + 1 for index in range(batch, batch + 32)]
                    frames = []
                    for stream_id in streams:
                        padding = hpack.NeverIndexedHeaderTuple(
                            "x-pad", f"{number}.{stream_id}." + "p" * 32000
                        )
                        block = peer.block([*grpc_headers(), padding])
                        frames += [
                            frame(FrameType.HEADERS, Flag.END_HEADERS, stream_id, block),
                            data_frame(stream_id, grpc_message(), end_stream=True),
                        ]
                    peer.send(*frames)
                    for stream_id in streams:
                        peer.grpc_status(stream_id)
            # The connections stay open: whatever they hold is still held now.
            _assert_rss(attacked, before)
        finally:
            for peer in peers:
                peer.close()

    bystander.during(attack)


# --- streams ----------------------------------------------------------------------------------------------


def test_concurrent_streams_over_the_limit_are_refused(attacked: ServerProcess, bystander: Bystander) -> None:
    with RawH2(attacked.grpc_address) as peer:
        limit = peer.server_settings.get(Setting.MAX_CONCURRENT_STREAMS)
        assert limit is not None, "the server advertises no SETTINGS_MAX_CONCURRENT_STREAMS (no limit)"
        assert limit <= 1000, f"SETTINGS_MAX_CONCURRENT_STREAMS is {limit}"
        # Streams left open (no END_STREAM): each waits for its request message.
        opened = [2 * index + 1 for index in range(limit + 5)]
        peer.send(*(peer.headers(stream_id) for stream_id in opened))
        for stream_id in opened[limit:]:
            assert peer.stream_error(stream_id) == ErrorCode.REFUSED_STREAM
    bystander.call()


def test_rapid_reset(attacked: ServerProcess, bystander: Bystander) -> None:
    """Streams opened and reset at once, 20,000 of them (CVE-2023-44487): GOAWAY ENHANCE_YOUR_CALM."""
    before = rss_bytes(attacked.pid)

    def attack() -> None:
        with RawH2(attacked.grpc_address) as peer:
            for batch in range(40):
                frames = []
                for index in range(500):
                    stream_id = 2 * (batch * 500 + index) + 1
                    frames += [peer.headers(stream_id), rst_stream(stream_id, ErrorCode.CANCEL)]
                if not peer.send(*frames):
                    break
            assert peer.connection_error() == ErrorCode.ENHANCE_YOUR_CALM

    bystander.during(attack)
    _assert_rss(attacked, before)


def test_headers_on_a_closed_stream_are_answered(attacked: ServerProcess, bystander: Bystander) -> None:
    """A stream that ended, reopened with HEADERS: a stream or connection error, never silence."""
    with RawH2(attacked.grpc_address) as peer:
        peer.send(peer.call(1))
        assert peer.grpc_status(1)[0] == 0
        peer.send(peer.headers(1, end_stream=True))
        kind, code = peer.reaction(1)
        assert kind != "closed", "the server closed the connection without RST_STREAM or GOAWAY"
        assert code in {ErrorCode.STREAM_CLOSED, ErrorCode.PROTOCOL_ERROR}, (kind, code)
    bystander.call()


# --- flow control and control frames ------------------------------------------------------------------


def test_zero_window_parked_streams_and_window_update_burst(
    attacked: ServerProcess, bystander: Bystander
) -> None:
    """5,000 calls parked on a zero window, then 110 KiB of WINDOW_UPDATE and SETTINGS frames."""
    before = rss_bytes(attacked.pid)

    def attack() -> None:
        with RawH2(attacked.grpc_address, settings={Setting.INITIAL_WINDOW_SIZE: 0}) as peer:
            calls = [peer.call(2 * index + 1) for index in range(5000)]
            for start in range(0, len(calls), 500):
                if not peer.send(*calls[start : start + 500]):
                    return
            burst = (window_update(0, 1) + settings_frame({Setting.INITIAL_WINDOW_SIZE: 0})) * 5000
            peer.send(burst)

    bystander.during(attack)
    _assert_rss(attacked, before)


@pytest.mark.parametrize(
    "unit",
    [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.PING, 0, 0, b"12345678")],
    ids=["SETTINGS", "PING"],
)
def test_control_frame_flood_from_a_peer_that_never_reads(
    attacked: ServerProcess, bystander: Bystander, unit: bytes
) -> None:
    """Frames that each ask for an ACK, 64 MiB of them, never reading the ACKs."""
    before = rss_bytes(attacked.pid)

    def attack() -> int:
        with RawH2(attacked.grpc_address) as peer:
            return peer.flood(unit, 64 * MiB)

    sent = bystander.during(attack)
    assert sent < 64 * MiB, "the server read 64 MiB of frames asking for ACKs from a peer that reads none"
    _assert_rss(attacked, before)


# --- gRPC compression -----------------------------------------------------------------------------------


def test_grpc_gzip_bomb(attacked: ServerProcess, bystander: Bystander) -> None:
    """1 MiB of gzip that inflates to 1 GiB: RESOURCE_EXHAUSTED naming the limit, nothing inflated past it."""
    bomb = gzip_zeros(1 << 30)
    before = rss_bytes(attacked.pid)

    def attack() -> tuple[int, str]:
        with RawH2(attacked.grpc_address, timeout_s=30) as peer:
            headers = grpc_headers("ModelInfer", grpc_encoding="gzip")
            peer.send(
                peer.headers(1, headers), data_frame(1, grpc_message(bomb, compressed=True), end_stream=True)
            )
            return peer.grpc_status(1)

    code, message = bystander.during(attack)
    assert code == 8, f"grpc-status {code} ({message}), expected RESOURCE_EXHAUSTED"
    assert re.search(r"\d{6,} bytes", message), f"the message does not say the limit: {message}"
    _assert_rss(attacked, before, bound=BOMB_RSS_BOUND)
