"""Our HTTP/2 core against python-hyper's ``h2`` state machine, each behind the same minimal gRPC echo server.

Issue 12 asked: if ``h2`` comes within the rounds' spread of our own framing, use it. Both servers here
do the same gRPC work and nothing else (read the length-prefixed request message, answer it back with
status trailers), on uvloop, so the difference is the HTTP/2 layer alone: frame parsing, HPACK, flow
control and output batching. Loaded by the ``sonic perf`` engine over grpcio, like
``benchmarks/grpc_frontend.py``: identity-sized requests at concurrency 1 and 32, and a 15.6 MB request
(echoed: 15.6 MB each way) at concurrency 1.

    .venv/bin/python -m benchmarks.h2_library [--rounds 3] [--window-s 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
from typing import Any, cast

import h2.config
import h2.connection
import h2.events
import numpy as np
import uvloop
from h2.settings import SettingCodes

from benchmarks.harness.load import infer_request_bytes, load_with_server_cpu
from benchmarks.harness.processes import steady_malloc
from benchmarks.harness.report import machine, save
from sonic.grpc.call import MessageReader, grpc_message_prefix
from sonic.h2.aio import H2Protocol
from sonic.h2.headers import Headers, encode_headers
from sonic.h2.server import ServerRole
from sonic.h2.stream import Stream
from sonic.launch import free_port, terminate

LARGE_SHAPE = (1693, 48, 48, 1)


HEAD = encode_headers([(b":status", b"200"), (b"content-type", b"application/grpc")])
TRAILERS = encode_headers([(b"grpc-status", b"0")])


Echoing = tuple[MessageReader, list[bytes | memoryview]]  # a stream's reader and its messages so far


class NativeEcho:
    """The echo as the handler of our server-role core (sonic.h2), on its asyncio adapter."""

    def __init__(self) -> None:
        self.h2 = ServerRole[Echoing](self).connection
        self.protocol = H2Protocol(self.h2)

    def headers_received(self, stream: Stream[Echoing | None], headers: Headers, end_stream: bool) -> None:  # noqa: ARG002
        stream.app = (MessageReader(1 << 30), [])

    def stream_data(self, stream: Stream[Echoing | None], data: memoryview) -> None:
        assert stream.app is not None  # set as the headers came
        reader, messages = stream.app
        messages.extend(m for _, m in reader.feed(data))

    def stream_ended(self, stream: Stream[Echoing | None]) -> None:
        assert stream.app is not None
        message = stream.app[1][0]
        self.h2.send_headers(stream, HEAD)
        self.h2.respond(stream, [grpc_message_prefix(len(message)), message], TRAILERS)

    def stream_reset(self, stream: Stream[Echoing | None]) -> None:
        pass

    def goaway_received(
        self, last_stream_id: int, code: int, unprocessed: list[Stream[Echoing | None]]
    ) -> None:
        pass


class H2Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        config = h2.config.H2Configuration(
            client_side=False, header_encoding=None, validate_inbound_headers=False
        )
        self.conn = h2.connection.H2Connection(config)
        self.conn.initiate_connection()
        # The same windows and frame size as our core announces.
        self.conn.update_settings(
            {SettingCodes.INITIAL_WINDOW_SIZE: 1 << 26, SettingCodes.MAX_FRAME_SIZE: 1 << 20}
        )
        self.conn.increment_flow_control_window((1 << 30) - 65535)
        self.readers: dict[int, tuple[MessageReader, list[Any]]] = {}
        self.pending: dict[int, memoryview] = {}
        self.transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self.readers[event.stream_id] = (MessageReader(1 << 30), [])
            elif isinstance(event, h2.events.DataReceived):
                reader, messages = self.readers[event.stream_id]
                messages.extend(m for _, m in reader.feed(memoryview(event.data)))
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                message = self.readers.pop(event.stream_id)[1][0]
                self.conn.send_headers(
                    event.stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc")]
                )
                self.pending[event.stream_id] = memoryview(grpc_message_prefix(len(message)) + bytes(message))
                self.send_pending(event.stream_id)
            elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
                for stream_id in list(self.pending):
                    self.send_pending(stream_id)
        self.transport.write(self.conn.data_to_send())

    def send_pending(self, stream_id: int) -> None:
        body = self.pending[stream_id]
        while body:
            window = self.conn.local_flow_control_window(stream_id)
            size = min(window, self.conn.max_outbound_frame_size, len(body))
            if size <= 0:
                self.pending[stream_id] = body
                return
            self.conn.send_data(stream_id, body[:size].tobytes())
            body = body[size:]
        del self.pending[stream_id]
        self.conn.send_headers(stream_id, [(b"grpc-status", b"0")], end_stream=True)


def serve(kind: str, port: int) -> None:
    async def main() -> None:
        def protocol() -> asyncio.Protocol:
            return NativeEcho().protocol if kind == "native" else H2Echo()

        server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", port)
        print("ready", flush=True)
        await server.serve_forever()

    uvloop.run(main())


def start(kind: str) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.h2_library", "--serve", kind, str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        terminate(process, timeout_s=5)
        raise RuntimeError(f"the {kind} echo server did not start")
    return process, f"127.0.0.1:{port}"


def run(rounds: int, window_s: float) -> dict[str, Any]:
    small = infer_request_bytes("identity", {"INPUT0": np.ones((1, 16), np.float32)}, {"INPUT0": "FP32"})
    large_array = np.random.default_rng(0).random(LARGE_SHAPE, dtype=np.float32)
    large = infer_request_bytes("identity_large", {"INPUT0": large_array}, {"INPUT0": "FP32"})
    workloads = [("small c1", small, 1), ("small c32", small, 32), ("15.6 MB c1", large, 1)]
    servers = {kind: start(kind) for kind in ("native", "h2")}
    rows: list[dict[str, Any]] = []
    try:
        for round_index in range(rounds):
            order = list(servers)[round_index % 2 :] + list(servers)[: round_index % 2]
            for label, payload, concurrency in workloads:
                for name in order:
                    process, address = servers[name]
                    result, cpu_us = load_with_server_cpu(
                        address, payload, process.pid, concurrency=concurrency, window_s=window_s
                    )
                    cpu_us = round(cpu_us, 1)
                    row = {"round": round_index, "workload": label, "server": name, **vars(result)}
                    row["server_cpu_us_per_request"] = cpu_us
                    rows.append(row)
                    print(
                        f"round {round_index} {label:11s} {name:6s} {result.requests_per_s:9.1f} req/s "
                        f"p50 {result.p50_ms:7.2f} ms  server CPU {cpu_us} µs/req",
                        flush=True,
                    )
    finally:
        for process, _ in servers.values():
            terminate(process, timeout_s=5)
    summary: dict[str, Any] = {}
    for label, _, _ in workloads:
        entry: dict[str, Any] = {}
        for name in servers:
            mine = [row for row in rows if row["workload"] == label and row["server"] == name]
            entry[name] = {
                "requests_per_s": statistics.median(r["requests_per_s"] for r in mine),
                "server_cpu_us_per_request": statistics.median(r["server_cpu_us_per_request"] for r in mine),
                "rounds_requests_per_s": [r["requests_per_s"] for r in mine],
            }
        summary[label] = entry
    return {"rows": rows, "summary": summary, "machine": machine(), "window_s": window_s}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=3.0)
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    steady_malloc()
    result = run(args.rounds, args.window_s)
    print(save("h2_library", result))


if __name__ == "__main__":
    main()
