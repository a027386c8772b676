"""gRPC above our HTTP/2 stack (:mod:`sonic.h2`), sans I/O (large inflations go to a worker thread).

- :mod:`~sonic.grpc.unary`: one unary call's answer assembled from what its stream delivers (headers,
  DATA, trailers) into the message or a failure, for both client drivers (the asyncio transport
  :mod:`sonic.client.transport.h2_connection` and the blocking :mod:`sonic.client.blocking`)
- :mod:`~sonic.grpc.call`: what the gRPC spec puts on HTTP/2 for either end: length-prefixed message
  framing, ``grpc-timeout``, ``grpc-status``/``grpc-message`` trailers, RST_STREAM codes as statuses,
  ``grpc-encoding`` compression
- :mod:`~sonic.grpc.inflate`: bounded gzip/deflate inflation (also used by the HTTP/REST front end
  for ``Content-Encoding``)
"""
