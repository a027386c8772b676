"""Helpers for tests of our HTTP/2 connections (server and client) without sockets."""

from __future__ import annotations

import asyncio
from typing import Any

from sonic.h2.connection import Connection
from sonic.h2.headers import Headers
from sonic.h2.lifecycle import ConnectionState
from sonic.h2.stream import Stream


class RecordingTransport:
    """Collects what the connection writes (the socket's role; nothing else is faked)."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.writes: list[bytes] = []  # what each writelines() call wrote: one socket write each
        self.closed = False
        self.eof_written = False  # writing shut down (a lingering close)
        self.ended = asyncio.Event()  # closed or aborted

    def writelines(self, data: list[bytes | memoryview]) -> None:
        start = len(self.written)
        for piece in data:
            self.written += piece
        self.writes.append(bytes(self.written[start:]))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True
        self.ended.set()

    def abort(self) -> None:
        self.closed = True
        self.ended.set()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof_written = True

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5000) if name == "peername" else None


def parse_frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    frames = []
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        frame_type, flags = data[pos + 3], data[pos + 4]
        stream_id = int.from_bytes(data[pos + 5 : pos + 9], "big")
        frames.append((frame_type, flags, stream_id, data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return frames


class CoreOutput:
    """What a sans-I/O connection core (:class:`sonic.h2.connection.Connection`) wrote: each read of
    :attr:`written` takes what is queued (``data_to_send()``), as one loop iteration of the adapter would."""

    def __init__(self, core: Connection[Any]) -> None:
        self._core = core
        self._written = bytearray()

    @property
    def written(self) -> bytearray:
        for piece in self._core.data_to_send():
            self._written += piece
        return self._written

    @property
    def closed(self) -> bool:
        """The core wants its transport closed (or dropped)."""
        return self._core.state in {ConnectionState.CLOSING, ConnectionState.ABORTING}


class SilentHandler:
    """A connection's handler that answers nothing and records nothing: streams stay as the test leaves them."""

    def headers_received(self, stream: Stream[Any], headers: Headers, end_stream: bool) -> None:
        pass

    def stream_data(self, stream: Stream[Any], data: memoryview) -> None:
        pass

    def stream_ended(self, stream: Stream[Any]) -> None:
        pass

    def stream_reset(self, stream: Stream[Any]) -> None:
        pass

    def goaway_received(self, last_stream_id: int, code: int, unprocessed: list[Stream[Any]]) -> None:
        pass
