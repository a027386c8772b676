"""HTTP/2 (RFC 9113, RFC 7541): the stack under our gRPC server and client, sans I/O.

Laid out like python-hyper h2, one module per concept, composed (no class here inherits another of ours):

- :mod:`~sonic.h2.frames`: frame types, flags, error codes, setting ids, the frames we build
- :mod:`~sonic.h2.headers`: HPACK with its bounds (encoder, memoised bounded decoder, header blocks
  over CONTINUATION) and the field rules of RFC 9113 section 8
- :mod:`~sonic.h2.hpack_bounded`: hpack's decoder and dynamic table subclassed (a cap on table-size
  updates, a count of insertions); interpreted, as a compiled class may not derive from a third-party one
- :mod:`~sonic.h2.stream`: one stream's state machine (:class:`~sonic.h2.stream.StreamState`, one
  transition table) and recently closed ids
- :mod:`~sonic.h2.lifecycle`: one connection's state machine
  (:class:`~sonic.h2.lifecycle.ConnectionState`, one transition table)
- :mod:`~sonic.h2.windows`: flow control, send side (the output queue, the windows) and receive side
- :mod:`~sonic.h2.settings`: the SETTINGS we send, the peer's checked
- :mod:`~sonic.h2.limits`: :class:`~sonic.h2.limits.Http2Limits` (units in names) and the memo budget
- :mod:`~sonic.h2.control`: control frames and the flood counters
- :mod:`~sonic.h2.timers`: idle timeout and PING keepalive as deadlines
- :mod:`~sonic.h2.events`: the one :class:`~sonic.h2.events.Handler` a connection calls, its role, and the
  :class:`~sonic.h2.events.DataSink` an application may give for DATA to land in its own memory
- :mod:`~sonic.h2.connection`: the connection core both ends share (bytes in, events and bytes out)
- :mod:`~sonic.h2.server`, :mod:`~sonic.h2.client`: the two roles, each holding its core
- :mod:`~sonic.h2.aio`: the one asyncio adapter, holding a core (and, for a core with a sink, the
  ``BufferedProtocol`` that reads into the memory the core picks)

It sits at the protocol layer: it imports no client or server code, and nothing of gRPC (that is
:mod:`sonic.grpc`, above it); only :mod:`~sonic.h2.aio` imports asyncio. The gRPC server front end on it is
:mod:`sonic.server.frontends.grpc_h2` (``sonic serve --grpc-server h2``, the default), the
client transport :mod:`sonic.client.transport.h2` (``transport = "h2"``, the default); ``native``, the old
name of both, is still accepted. Those applications see a connection through its methods and hold its
streams as handles (:class:`~sonic.h2.stream.Stream`, generic in what they hang on it, ``stream.app``).
"""
