"""The soak's six workers (benchmarks.soak): each calls one ``sonic serve`` in its own way, one call at a
time with a short pause, until told to stop, and counts what came back in a shared tally.

Calls that must succeed are checked (outputs equal to inputs); bad requests must fail with the status
expected of them; anything else counts as an unexpected error, the first ten kept by their message.
"""

from __future__ import annotations

import asyncio
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from sonic.client import AsyncClient, ClientConfig, SharedMemoryMode
from sonic.launch import ServerProcess


class Tally:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = self.expected_errors = self.unexpected_errors = 0
        self.first_unexpected: list[str] = []

    def ok(self) -> None:
        with self._lock:
            self.calls += 1

    def expected(self) -> None:
        with self._lock:
            self.calls += 1
            self.expected_errors += 1

    def unexpected(self, what: str) -> None:
        with self._lock:
            self.calls += 1
            self.unexpected_errors += 1
            if len(self.first_unexpected) < 10:
                self.first_unexpected.append(what)


@dataclass(frozen=True)
class Run:
    server: ServerProcess
    tally: Tally
    stop: threading.Event
    pause_s: float


def _check(run: Run, name: str, sent: np.ndarray[Any, Any], got: np.ndarray[Any, Any] | None) -> None:
    if got is not None and got.shape == sent.shape and np.array_equal(got, sent):
        run.tally.ok()
    else:
        run.tally.unexpected(f"{name}: wrong output {None if got is None else got.shape}")


def _loop(run: Run, name: str, step: Callable[[int], None], pause_s: float) -> None:
    index = 0
    while not run.stop.is_set():
        try:
            step(index)
        except Exception as exc:  # noqa: BLE001  (counted, the soak goes on)
            run.tally.unexpected(f"{name}: {type(exc).__name__}: {exc}")
        index += 1
        run.stop.wait(pause_s)  # pacing of a shared machine, not a synchronisation


def sonic_grpc(run: Run) -> None:
    async def main() -> None:
        config = ClientConfig(servers=(run.server.grpc_address,), shared_memory=SharedMemoryMode.AUTO)
        shapes = [("identity", (1, 16)), ("identity", (8, 16)), ("identity", (256, 16)),
                  ("identity_large", (1, 48, 48, 1)), ("identity_large", (16, 48, 48, 1))]  # fmt: skip
        clients = {m: AsyncClient(m, config) for m in {m for m, _ in shapes}}
        try:
            index = 0
            while not run.stop.is_set():
                model, shape = shapes[index % len(shapes)]
                x = np.random.default_rng(index).random(shape, dtype=np.float32)
                try:
                    _check(run, model, x, (await clients[model].infer({"INPUT0": x}))["OUTPUT0"])
                except Exception as exc:  # noqa: BLE001
                    run.tally.unexpected(f"sonic_grpc {model}: {type(exc).__name__}: {exc}")
                index += 1
                await asyncio.sleep(run.pause_s)  # pacing, as in _loop
        finally:
            for client in clients.values():
                await client.close()

    asyncio.run(main())


def triton_grpc(run: Run) -> None:
    client = grpcclient.InferenceServerClient(run.server.grpc_address)

    def step(index: int) -> None:
        cases: list[tuple[str, np.ndarray[Any, Any], str]] = [
            ("identity_fp16", np.ones((2, 1 + index % 300), np.float16), "FP16"),
            ("identity_int64", np.arange(8, dtype=np.int64).reshape(1, 4, 2), "INT64"),
            ("nobatch", np.ones((2, 3), np.float32), "FP32"),
        ]
        model, x, datatype = cases[index % len(cases)]
        tensor = grpcclient.InferInput("INPUT0", list(x.shape), datatype)
        tensor.set_data_from_numpy(x)
        _check(run, model, x, client.infer(model, [tensor]).as_numpy("OUTPUT0"))

    try:
        _loop(run, "triton_grpc", step, run.pause_s)
    finally:
        client.close()


def triton_http(run: Run) -> None:
    client = httpclient.InferenceServerClient(run.server.http_address)

    def step(index: int) -> None:
        if index % 2:
            x: np.ndarray[Any, Any] = np.ones((1 + index % 32, 16), np.float32)
            model, datatype = "identity", "FP32"
        else:
            x, model, datatype = np.array([[True, False, True, True]]), "identity_bool", "BOOL"
        tensor = httpclient.InferInput("INPUT0", list(x.shape), datatype)
        tensor.set_data_from_numpy(x, binary_data=index % 4 < 2)
        _check(run, model, x, client.infer(model, [tensor]).as_numpy("OUTPUT0"))

    try:
        _loop(run, "triton_http", step, run.pause_s)
    finally:
        client.close()


def bad_requests(run: Run) -> None:
    grpc = grpcclient.InferenceServerClient(run.server.grpc_address)
    url = f"http://{run.server.http_address}/v2/models/identity/infer"

    def grpc_call(model: str, x: np.ndarray[Any, Any], datatype: str) -> None:
        tensor = grpcclient.InferInput("INPUT0", list(x.shape), datatype)
        tensor.set_data_from_numpy(x)
        grpc.infer(model, [tensor])

    def step(index: int) -> None:
        kind = index % 4
        try:
            if kind == 0:
                grpc_call("no_such_model", np.ones((1, 16), np.float32), "FP32")
            elif kind == 1:
                grpc_call("identity", np.ones((1, 17), np.float32), "FP32")
            elif kind == 2:
                grpc_call("identity", np.ones((1, 16), np.int32), "INT32")
            else:
                body = b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1,'
                request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
                urllib.request.urlopen(request, timeout=10).close()
        except InferenceServerException as exc:
            if exc.status() in {"StatusCode.NOT_FOUND", "StatusCode.INVALID_ARGUMENT"}:
                run.tally.expected()
            else:
                run.tally.unexpected(f"bad {kind}: {exc}")
            return
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 400:
                run.tally.expected()
            else:
                run.tally.unexpected(f"bad http: {exc.code}")
            return
        run.tally.unexpected(f"bad request {kind} succeeded")

    try:
        _loop(run, "bad", step, max(run.pause_s, 0.02))
    finally:
        grpc.close()


def shared_memory(run: Run) -> None:
    client = grpcclient.InferenceServerClient(run.server.grpc_address)

    def step(index: int) -> None:
        x = np.full((4, 16), index, np.float32)
        name = f"soak_{os.getpid()}_{index}"
        regions = [shm.create_shared_memory_region(f"{name}_{io}", f"/{name}_{io}", x.nbytes) for io in "io"]
        try:
            shm.set_shared_memory_region(regions[0], [x])
            for io in "io":
                client.register_system_shared_memory(f"{name}_{io}", f"/{name}_{io}", x.nbytes)
            tensor = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
            tensor.set_shared_memory(f"{name}_i", x.nbytes)
            output = grpcclient.InferRequestedOutput("OUTPUT0")
            output.set_shared_memory(f"{name}_o", x.nbytes)
            client.infer("identity", [tensor], outputs=[output])
            _check(run, "shm", x, shm.get_contents_as_numpy(regions[1], np.float32, list(x.shape)))
            for io in "io":
                client.unregister_system_shared_memory(f"{name}_{io}")
        finally:
            for region in regions:
                shm.destroy_shared_memory_region(region)

    try:
        _loop(run, "shm", step, max(run.pause_s, 0.1))
    finally:
        client.close()


def reload(run: Run) -> None:
    client = grpcclient.InferenceServerClient(run.server.grpc_address)

    def step(_index: int) -> None:
        client.unload_model("small_batch")
        client.load_model("small_batch")
        x = np.ones((2, 4), np.float32)
        tensor = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        _check(run, "reload", x, client.infer("small_batch", [tensor]).as_numpy("OUTPUT0"))

    try:
        _loop(run, "reload", step, 20.0)
    finally:
        client.close()


WORKERS = (sonic_grpc, triton_grpc, triton_http, bad_requests, shared_memory, reload)
