"""The protocol layer: KServe v2 as both ends speak it; the bottom layer, importing no server or client code.

- :mod:`~sonic.protocol.types`: inference requests and responses (server and client side), request parameters
- :mod:`~sonic.protocol.errors`: the error tree and the one status table (gRPC code, HTTP status, client retry)
- :mod:`~sonic.protocol.dtypes`: datatypes and tensor bytes
- :mod:`~sonic.protocol.model_config`: ``config.pbtxt`` parse, validate, complete
- :mod:`~sonic.protocol.grpc_codec`: ModelInfer / ModelStreamInfer messages (the only grpcio import here),
  on top of :mod:`~sonic.protocol.wire` (constants, hand-walked protobuf fields)
- :mod:`~sonic.protocol.http_json`: HTTP/REST JSON and binary-tensor bodies
- :mod:`~sonic.protocol.shm_names`: how the client names its shared-memory regions, so a server can tell whose
- :mod:`~sonic.protocol.http2`, :mod:`~sonic.protocol.h2connection`: HTTP/2 framing for the native gRPC stacks
- :mod:`~sonic.protocol.h2control`, :mod:`~sonic.protocol.h2output`, :mod:`~sonic.protocol.h2timers`,
  :mod:`~sonic.protocol.h2limits`: the HTTP/2 core's control frames, output and flow control, deadlines, limits
- :mod:`~sonic.protocol.h2asyncio`: the one asyncio adapter of that sans-I/O core (the only I/O here)
- :mod:`~sonic.protocol.grpc_call`: gRPC's call layer (framing, ``grpc-timeout``, status, compression)
- :mod:`~sonic.protocol.inflate`: bounded gzip/deflate inflation
"""
