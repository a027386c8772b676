"""Limits of one HTTP/2 connection, and the shared budget of the server's header-block memos.

Defaults follow what production HTTP/2 stacks settled on after the published attacks (CVE-2019-951x
"HTTP/2 DoS" family, CVE-2023-44487 rapid reset, CVE-2024-27316 and friends CONTINUATION floods):

- nghttp2: 100 concurrent streams; at most 8 CONTINUATION frames per header block; at most 1,000
  outbound ACKs queued (SETTINGS/PING) before the connection is dropped; rapid resets budgeted.
- Envoy: 1 consecutive empty-payload frame by default (we allow a few more), 100 PRIORITY frames per
  stream, 10 inbound WINDOW_UPDATEs per DATA frame sent, 1,000 queued control frames; "premature
  resets" (streams reset before their response) limited relative to the streams served.
- Go's net/http2: a header block cap (MaxHeaderBytes), a cap on queued control frames (10,000), and
  idle timeout/ping keepalive options.

Everything counts frames or bytes, never time, so the connection core needs no clock; the keepalive
and idle timers are deadlines the asyncio adapter arms (:mod:`sonic.h2.aio`).
"""

from __future__ import annotations

from dataclasses import dataclass

# The server's connection window: a 15.6 MB request still arrives without waiting on a WINDOW_UPDATE
# round trip, while the bytes a connection can send past the request-buffer budget stay small.
SERVER_CONNECTION_WINDOW_BYTES = 16 << 20


@dataclass(frozen=True)
class Http2Limits:
    """Per-connection limits of our HTTP/2 core (either end; the server's are ``sonic serve`` options)."""

    # Streams the peer may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS); more are REFUSED_STREAM.
    max_concurrent_streams: int = 100
    # One header block, HEADERS alone or with its CONTINUATIONs (encoded bytes), and the decoded list
    # (SETTINGS_MAX_HEADER_LIST_SIZE). Past either: GOAWAY ENHANCE_YOUR_CALM / COMPRESSION_ERROR.
    max_header_block_bytes: int = 1 << 16
    max_header_list_bytes: int = 1 << 16
    max_continuation_frames: int = 8
    # HPACK dynamic-table-size updates in one block: RFC 7541 section 4.2 allows two (smallest, final).
    max_table_size_updates: int = 2
    # Streams the peer resets before their response (or that we refuse), beyond the streams that
    # completed normally: past it, GOAWAY ENHANCE_YOUR_CALM (rapid reset, CVE-2023-44487).
    rapid_reset_budget: int = 200
    # Frames that carry nothing (DATA without payload or END_STREAM, empty CONTINUATION) in a row.
    max_consecutive_empty_frames: int = 10
    # Control frames we have queued (ACKs, RST_STREAMs, WINDOW_UPDATEs) and the peer has not read:
    # past it, GOAWAY ENHANCE_YOUR_CALM and the connection is dropped (no unbounded ACK queue).
    max_queued_control_frames: int = 1000
    # PRIORITY frames, per stream the peer opened (plus one stream's worth).
    max_priority_frames_per_stream: int = 100
    # WINDOW_UPDATE and SETTINGS frames, per DATA frame we sent (plus a fixed allowance).
    max_window_updates_per_data_frame: int = 10
    control_frame_allowance: int = 1000
    # What all streams of a connection may send before our WINDOW_UPDATE (the connection window). A
    # server that opens windows only as its request-buffer budget allows (``receive.on_receipt``
    # off) can be sent this much per connection beyond its budget, so the server's is smaller.
    connection_window_bytes: int = 1 << 30
    # Header-block memo of one connection (blocks that leave the HPACK table alone, and their lists).
    memo_bytes: int = 1 << 18
    # Recently closed stream ids remembered, with whether we reset them (RFC 9113 section 5.1 answers a
    # late frame on each differently). One that falls out is answered as closed by the peer.
    closed_streams_remembered: int = 512
    # No stream open and none opened for this long (PINGs do not count): GOAWAY and close (None: never).
    idle_timeout_s: float | None = None
    # No frame for this long: we send a PING; no answer within ``ping_timeout_s``: close (None: never).
    keepalive_interval_s: float | None = None
    ping_timeout_s: float = 20.0
    # Once we end a connection (a connection error, or our GOAWAY and no streams left): writing is shut
    # down and what the peer still sends is read and dropped for at most this long before the socket
    # closes, so the peer reads our GOAWAY (a lingering close, as nginx's and Go's servers do); closing
    # with unread bytes makes the kernel send a reset that destroys the GOAWAY in flight. 0: at once.
    # ``linger_bytes`` bounds what is read meanwhile: a flooding peer is dropped after that much.
    linger_s: float = 0.0
    linger_bytes: int = 4 << 20

    def __post_init__(self) -> None:
        for name in ("max_concurrent_streams", "max_header_block_bytes", "max_header_list_bytes"):
            if getattr(self, name) < 1:
                msg = f"Http2Limits.{name} must be at least 1, got {getattr(self, name)}"
                raise ValueError(msg)
        if not 1 << 16 <= self.connection_window_bytes <= (1 << 31) - 1:
            msg = (
                f"Http2Limits.connection_window_bytes must be within 65536 and 2**31-1, got "
                f"{self.connection_window_bytes}"
            )
            raise ValueError(msg)


SERVER_LIMITS = Http2Limits(
    idle_timeout_s=600.0,
    keepalive_interval_s=120.0,
    connection_window_bytes=SERVER_CONNECTION_WINDOW_BYTES,
    linger_s=2.0,
)
CLIENT_LIMITS = Http2Limits(max_concurrent_streams=(1 << 31) - 1)  # a server opens no streams to us


class MemoBudget:
    """Bytes that all of a server's connections may keep in their header-block memos together."""

    __slots__ = ("available",)

    def __init__(self, total_bytes: int) -> None:
        self.available = total_bytes

    def take(self, size: int) -> bool:
        if size > self.available:
            return False
        self.available -= size
        return True

    def give_back(self, size: int) -> None:
        self.available += size
