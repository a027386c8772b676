"""One test per published HTTP/2 and gRPC denial-of-service class, against a real `sonic serve`.

Each attack (sonic.testing.h2attacks) runs from raw sockets while a second, well-behaved client
(tritonclient.grpc) keeps calling: every one of its calls must be answered within CALL_BOUND_S, and
the server's resident memory may grow by at most a bound. Where RFC 9113 or common practice names the
reaction (GOAWAY with a code, RST_STREAM), the test asserts that too.
"""

from __future__ import annotations

import json
import re

import pytest

from sonic.h2.frames import ErrorCode, Setting
from sonic.launch import ServerProcess
from sonic.testing import h2attacks
from sonic.testing.h2attacks import Bystander
from sonic.testing.h2peer import RawH2

from .conftest import MiB, assert_rss, rss_bytes

RSS_BOUND = 64 * MiB
# The bomb inflates to 1 GiB; the server may inflate up to its default cap (256 MiB), not much more.
BOMB_RSS_BOUND = 384 * MiB
# GOAWAY codes that end an abusive connection (None: closed without one, which h2spec accepts too).
CALM = {None, ErrorCode.ENHANCE_YOUR_CALM, ErrorCode.PROTOCOL_ERROR, ErrorCode.COMPRESSION_ERROR,
        ErrorCode.FRAME_SIZE_ERROR}  # fmt: skip


@pytest.mark.parametrize("continuation", [False, True], ids=["headers", "continuation"])
def test_hpack_table_size_update_flood(
    attacked: ServerProcess, bystander: Bystander, continuation: bool
) -> None:
    before = rss_bytes(attacked.pid)
    code = bystander.during(
        lambda: h2attacks.hpack_size_updates(attacked.grpc_address, continuation=continuation)
    )
    assert code in CALM, f"GOAWAY {code}"
    assert_rss(attacked, before, RSS_BOUND)


@pytest.mark.parametrize("payload", [b"", b"\x00" * 16384], ids=["empty", "16KiB"])
def test_continuation_flood(attacked: ServerProcess, bystander: Bystander, payload: bytes) -> None:
    before = rss_bytes(attacked.pid)
    sent, code = bystander.during(lambda: h2attacks.continuation_flood(attacked.grpc_address, payload))
    assert sent < 16 * MiB, "the server read 16 MiB of CONTINUATION frames of one header block"
    assert code in CALM, f"GOAWAY {code}"
    assert_rss(attacked, before, RSS_BOUND)


def test_header_memo_growth_across_connections(attacked: ServerProcess, bystander: Bystander) -> None:
    before = rss_bytes(attacked.pid)
    bystander.during(
        lambda: h2attacks.header_memo(attacked.grpc_address, lambda: assert_rss(attacked, before, RSS_BOUND))
    )


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
    before = rss_bytes(attacked.pid)
    assert (
        bystander.during(lambda: h2attacks.rapid_reset(attacked.grpc_address)) == ErrorCode.ENHANCE_YOUR_CALM
    )
    assert_rss(attacked, before, RSS_BOUND)


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


def test_zero_window_parked_streams_and_window_update_burst(
    attacked: ServerProcess, bystander: Bystander
) -> None:
    before = rss_bytes(attacked.pid)
    bystander.during(lambda: h2attacks.zero_window_burst(attacked.grpc_address))
    assert_rss(attacked, before, RSS_BOUND)


@pytest.mark.parametrize("unit", [h2attacks.SETTINGS_UNIT, h2attacks.PING_UNIT], ids=["SETTINGS", "PING"])
def test_ack_flood_from_a_peer_that_never_reads(
    attacked: ServerProcess, bystander: Bystander, unit: bytes
) -> None:
    before = rss_bytes(attacked.pid)
    sent = bystander.during(lambda: h2attacks.ack_flood(attacked.grpc_address, unit, 64 * MiB))
    assert sent < 64 * MiB, "the server read 64 MiB of frames asking for ACKs from a peer that reads none"
    assert_rss(attacked, before, RSS_BOUND)


def test_grpc_gzip_bomb(attacked: ServerProcess, bystander: Bystander, gzip_bomb: bytes) -> None:
    """1 MiB of gzip that inflates to 1 GiB: RESOURCE_EXHAUSTED naming the limit, nothing inflated past it."""
    before = rss_bytes(attacked.pid)
    code, message = bystander.during(lambda: h2attacks.grpc_gzip_bomb(attacked.grpc_address, gzip_bomb))
    assert code == 8, f"grpc-status {code} ({message}), expected RESOURCE_EXHAUSTED"
    assert re.search(r"\d{6,} bytes", message), f"the message does not say the limit: {message}"
    assert_rss(attacked, before, BOMB_RSS_BOUND)


# --- HTTP/REST bodies -----------------------------------------------------------------------------------


def test_http_deeply_nested_json_is_a_400(attacked: ServerProcess, bystander: Bystander) -> None:
    before = rss_bytes(attacked.pid)
    status, error = bystander.during(lambda: h2attacks.http_deep_json(attacked.http_address))
    assert status == 400, error
    assert "nested too deeply" in error
    assert_rss(attacked, before, RSS_BOUND)


def test_http_oversized_content_length_is_refused_before_reading(
    attacked: ServerProcess, bystander: Bystander
) -> None:
    """3 GiB announced and none sent: 413 at once, and the connection closed (nothing more is read)."""
    response = bystander.during(lambda: h2attacks.http_content_length(attacked.http_address, 3 << 30))
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), response[:200]
    error = json.loads(body)["error"]
    assert str(3 << 30) in error
    assert "limit" in error


def test_http_gzip_bomb(attacked: ServerProcess, bystander: Bystander, gzip_bomb: bytes) -> None:
    before = rss_bytes(attacked.pid)
    status, error = bystander.during(lambda: h2attacks.http_gzip_bomb(attacked.http_address, gzip_bomb))
    assert status == 413, error
    assert re.search(r"\d{6,} bytes", error), f"the message does not say the limit: {error}"
    assert_rss(attacked, before, BOMB_RSS_BOUND)
