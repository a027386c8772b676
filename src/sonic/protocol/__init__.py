"""The KServe v2 vocabulary both ends speak; the bottom layer, importing no server or client code, and no I/O.

- :mod:`~sonic.protocol.types`: inference requests and responses (server and client side), request parameters
- :mod:`~sonic.protocol.errors`: the error tree and the one status table (gRPC code, HTTP status, client retry)
- :mod:`~sonic.protocol.dtypes`: datatypes and tensor bytes
- :mod:`~sonic.protocol.model_config`: ``config.pbtxt`` parse, validate, complete
- :mod:`~sonic.protocol.grpc_codec`: ModelInfer / ModelStreamInfer messages (the only grpcio import here),
  on top of :mod:`~sonic.protocol.wire` (constants, hand-walked protobuf fields)
- :mod:`~sonic.protocol.http_json`: HTTP/REST JSON and binary-tensor bodies
- :mod:`~sonic.protocol.http_raw`: Triton's raw binary HTTP request (no JSON: the body is the one input)
- :mod:`~sonic.protocol.shm_names`: how the client names its shared-memory regions, so a server can tell whose

The HTTP/2 + gRPC-call stack that carries these messages is its own package at this layer, :mod:`sonic.h2`.
"""
