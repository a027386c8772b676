"""SETTINGS (RFC 9113 section 6.5): what we announce, and the peer's, checked.

Our side's values follow from :class:`~sonic.h2.limits.Http2Limits` and the two sizes below; the
peer's are checked here and applied by the connection core to its windows (:mod:`sonic.h2.windows`).
"""

from __future__ import annotations

import struct

from sonic.h2.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_WINDOW_BYTES,
    MAX_FRAME_BYTES_LIMIT,
    MAX_WINDOW_BYTES,
    ErrorCode,
    ProtocolError,
    Setting,
    settings_frame,
    window_update,
)
from sonic.h2.limits import Http2Limits

STREAM_WINDOW_BYTES = 1 << 26  # what each stream may send before our WINDOW_UPDATE
MAX_FRAME_BYTES = 1 << 20  # largest frame we accept: big tensors arrive in few frames
MAX_SETTINGS_PER_FRAME = 64  # RFC 9113 defines 6; a 1 MiB frame of 174,000 would cost ~50 ms


def local_settings(limits: Http2Limits, extra: dict[Setting, int]) -> list[bytes]:
    """Our SETTINGS frame, and the WINDOW_UPDATE that opens the connection window to its limit."""
    settings = {
        Setting.INITIAL_WINDOW_SIZE: STREAM_WINDOW_BYTES,
        Setting.MAX_FRAME_SIZE: MAX_FRAME_BYTES,
        Setting.MAX_HEADER_LIST_SIZE: limits.max_header_list_bytes,
        Setting.ENABLE_PUSH: 0,
    }
    settings.update(extra)
    frames = [settings_frame(settings)]
    if limits.connection_window_bytes > DEFAULT_WINDOW_BYTES:
        frames.append(window_update(0, limits.connection_window_bytes - DEFAULT_WINDOW_BYTES))
    return frames


def peer_settings(payload: memoryview) -> list[tuple[int, int]]:
    """The entries of the peer's SETTINGS frame, each checked against RFC 9113 (unknown ids kept: ignored)."""
    if len(payload) > 6 * MAX_SETTINGS_PER_FRAME:
        msg = f"SETTINGS with more than {MAX_SETTINGS_PER_FRAME} entries"
        raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)
    entries = []
    for offset in range(0, len(payload), 6):
        key, value = struct.unpack_from(">HI", payload, offset)
        if key == Setting.INITIAL_WINDOW_SIZE and value > MAX_WINDOW_BYTES:
            raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE too large")
        if key == Setting.MAX_FRAME_SIZE and not DEFAULT_MAX_FRAME_BYTES <= value <= MAX_FRAME_BYTES_LIMIT:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"MAX_FRAME_SIZE {value} out of range")
        if key == Setting.ENABLE_PUSH and value > 1:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"ENABLE_PUSH {value} is not 0 or 1")
        entries.append((key, value))
    return entries
