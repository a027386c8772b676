"""What an HTTP/2 connection core tells its application, and what it asks of its role.

The core (:class:`sonic.h2.connection.Connection`) calls one :class:`Handler`: the application's
events, one method each (python-hyper h2 returns event objects instead; calls cost less per request).
What differs between the two ends is a :class:`Role`: :class:`sonic.h2.server.ServerRole` or
:class:`sonic.h2.client.ClientRole`, each holding its core.

Both are generic in ``T``, what the application hangs on a stream (``Stream.app``): the events hand
the application its streams as handles, typed with it.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from sonic.h2.headers import Headers
from sonic.h2.stream import Stream

T = TypeVar("T")


class Handler(Protocol[T]):
    """The application on one connection (the gRPC call layer of our server or client)."""

    def headers_received(self, stream: Stream[T], headers: Headers, end_stream: bool) -> None:
        """Server: a request's headers, as the peer opens ``stream`` (its END_STREAM follows as
        :meth:`stream_ended`). Client: the response's headers, then its trailers (``end_stream``)."""

    def stream_data(self, stream: Stream[T], data: memoryview) -> None:
        """DATA for ``stream``: a view valid only during the call."""

    def stream_ended(self, stream: Stream[T]) -> None:
        """The peer sent END_STREAM (server: after DATA, headers or trailers; client: on DATA)."""

    def stream_reset(self, stream: Stream[T]) -> None:
        """The stream is gone before we finished it (RST_STREAM either way, connection lost)."""

    def goaway_received(self, last_stream_id: int, code: int, unprocessed: list[Stream[T]]) -> None:
        """The peer's GOAWAY (the role has already stopped new streams). Client: ``unprocessed`` are our
        streams above ``last_stream_id``, which the server never processed; the role has forgotten them
        (safe to send again elsewhere). Server: always empty."""


class DataSink(Protocol[T]):
    """An application that takes a stream's DATA in its own memory (:meth:`Connection.set_sink`): the rest of a
    DATA payload in progress is read from the socket straight to where the application wants it
    (:meth:`Connection.receive_target`), instead of into the adapter's buffer and copied from there."""

    def stream_sink(self, stream: Stream[T]) -> memoryview | None:
        """Writable memory for the next DATA bytes of ``stream`` (None: pass them to ``stream_data``)."""

    def stream_data_placed(self, stream: Stream[T], size: int) -> None:
        """``size`` bytes of DATA for ``stream`` were written at the start of what ``stream_sink`` gave."""


class Role(Protocol[T]):
    """What the two ends do differently; the core calls it."""

    def start(self) -> None:
        """Our side's opening: preface (client) and SETTINGS."""

    def headers_done(self, stream_id: int, flags: int, block: bytes) -> None:
        """A whole header block (HEADERS with its CONTINUATIONs) arrived."""

    def finished(self, stream: Stream[T]) -> None:
        """We sent END_STREAM on ``stream``."""

    def goaway_received(self, last_stream_id: int, code: int) -> None:
        """The peer's GOAWAY."""
