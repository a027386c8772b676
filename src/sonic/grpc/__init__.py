"""gRPC above our HTTP/2 stack (:mod:`sonic.h2`), sans I/O.

- :mod:`~sonic.grpc.unary`: one unary call's answer assembled from what its stream delivers (headers,
  DATA, trailers) into the message or a failure, for both client drivers (the asyncio transport
  :mod:`sonic.client.transport.h2_connection` and the blocking :mod:`sonic.client.blocking`).

gRPC's message framing, status trailers and bounded inflation are in :mod:`sonic.h2.grpc_call` and
:mod:`sonic.h2.inflate` today; they are to move here.
"""
