"""Soak (issue 23): mixed load on one ``sonic serve`` for 30 minutes, its RSS sampled to a CSV.

Every worker runs until the end, one call at a time with a short pause (the machine is shared; the
figure is the memory slope, not throughput):

- ``sonic_grpc``: ``sonic.client`` (native HTTP/2 gRPC, shared memory on: this host) calling
  ``identity`` with 1, 8 and 256 rows and ``identity_large`` with 1 and 16 rows;
- ``triton_grpc``: ``tritonclient.grpc``, ``identity_fp16`` of varying length, ``identity_int64``, ``nobatch``;
- ``triton_http``: ``tritonclient.http`` (binary tensors and JSON), ``identity`` and ``identity_bool``;
- ``bad``: requests that must fail (unknown model, wrong shape, wrong datatype, malformed JSON body),
  over both protocols; each must fail with the expected status;
- ``shm``: a system shared-memory region created, registered, used for input and output, unregistered
  and destroyed per call;
- ``reload``: ``small_batch`` unloaded and loaded again (explicit model control), then called.

The server's RSS and anonymous RSS (its process and descendants, from /proc) are written every
``--sample-s`` to ``benchmarks/results/soak/rss.csv``; the summary (``summary.json``) holds the slope
of a linear fit of the anonymous RSS over the last 20 minutes (the last two thirds of a shorter
run) in MB/min, against a target of 0.5, and the same for the whole RSS. (File-backed pages, the
shared libraries, are the kernel's to drop and fault back in on a shared machine: a leak is
anonymous memory.)

Usage: python -m benchmarks.soak [--minutes 30] [--sample-s 5] [--out-dir benchmarks/results/soak]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from benchmarks.soak_fit import Sample, fit_window_s, parse_status, summarize, write_csv
from sonic.client import AsyncClient, ClientConfig, SharedMemoryMode
from sonic.launch import ServerProcess
from sonic.testing.repository import write_test_repository

# --- the run ---------------------------------------------------------------------------------------


def process_tree_rss(pid: int) -> tuple[int, int]:
    """RSS and anonymous RSS of ``pid`` and its descendants (backend stubs, if any)."""
    total, anon, pending = 0, 0, [pid]
    while pending:
        current = pending.pop()
        try:
            rss, rss_anon = parse_status(Path(f"/proc/{current}/status").read_text())
            total, anon = total + rss, anon + rss_anon
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited between the listing and the read
    return total, anon


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


def soak(repository: Path, minutes: float, sample_s: float, pause_s: float, csv_path: Path) -> dict[str, Any]:
    server = ServerProcess.start(
        [repository],
        extra_args=["--http-port", "0", "--model-control-mode", "explicit", "--load-model", "*"],
    )
    run = Run(server, Tally(), threading.Event(), pause_s)
    threads = [threading.Thread(target=w, args=(run,), name=w.__name__) for w in WORKERS]
    samples: list[Sample] = []
    started = time.monotonic()
    end = started + minutes * 60.0
    try:
        for thread in threads:
            thread.start()
        while True:
            now = time.monotonic()
            tally = run.tally
            samples.append(
                Sample(
                    round(now - started, 2),
                    *process_tree_rss(server.pid),
                    tally.calls,
                    tally.expected_errors,
                    tally.unexpected_errors,
                )
            )
            write_csv(csv_path, samples)  # whole file each time: a killed run still leaves its CSV
            if now >= end or server.process.poll() is not None:
                break
            time.sleep(min(sample_s, max(end - now, 0.0)))  # the sampling period itself
    finally:
        run.stop.set()
        for thread in threads:
            thread.join()
        code = server.stop()
    report = summarize(samples, fit_window_s(minutes))
    report |= {
        "minutes": minutes,
        "server_exit_code": code,
        "first_unexpected_errors": run.tally.first_unexpected,
        "load_average_at_end": os.getloadavg(),
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run")
    parser.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling period")
    parser.add_argument("--pause-ms", type=float, default=5.0, help="pause of each worker between calls")
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/soak"))
    args = parser.parse_args()
    if args.minutes <= 0 or args.sample_s <= 0 or args.pause_ms < 0:
        parser.error("--minutes and --sample-s must be positive, --pause-ms not negative")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sonic-soak-") as tmp:
        repository = write_test_repository(Path(tmp) / "repo", "sonic")
        report = soak(repository, args.minutes, args.sample_s, args.pause_ms / 1000, args.out_dir / "rss.csv")
    (args.out_dir / "summary.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
