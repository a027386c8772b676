"""What reading and writing system shared memory by ``preadv``/``pwritev`` costs against mapped views.

The server used to map each region and hand out views of the mapping (a SIGBUS, and the server's death,
once a client truncates its object); it now copies through the descriptor (:mod:`sonic.server.shm.regions`).

Two parts, each over ``--rounds`` rounds, medians printed and saved to benchmarks/results/shm_access.json:

- ``access``: one tensor's access in this process, for sizes 4 KiB to 64 MiB: before, a view of the
  mapping (inputs, no copy) and a memcpy into it (outputs); after, ``Region.read`` and ``Region.write``
  as the server calls them, for a mapped region (an object only the server's user can write: a size
  check, then the same view and memcpy) and a copied one (anyone else's, or ``--shm-copy-always``:
  ``preadv``/``pwritev``, off the event loop from 256 KiB). For scale, ``touch`` is one pass of numpy
  over the tensor (``sum``), the least a model does with its input.
- ``requests``: whole requests through ``sonic serve`` from tritonclient (gRPC), input and output in
  shared memory, identity models from 64 B to 19 MB: a server of ``--before`` (a commit: its ``src``
  is taken with ``git archive``), this checkout's, and this checkout's with ``--shm-copy-always``,
  taking turns within each round.

    .venv/bin/python -m benchmarks.shm_access [--rounds 5] [--before 4ffe123] [--skip-requests]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import mmap
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.harness.ratios import per_server
from benchmarks.harness.report import machine, save
from benchmarks.harness.rounds import visits
from benchmarks.harness.servers import ServerSet
from sonic.launch import ServerProcess
from sonic.protocol import dtypes
from sonic.server.shm.opening import SHM_ROOT
from sonic.server.shm.regions import Region, SharedMemoryRegistry, write_output
from sonic.testing.repository import MODELS, write_test_repository

SIZES = (4 << 10, 256 << 10, 4 << 20, 64 << 20)
REQUESTS = (("identity", 1, (16,)), ("identity_large", 8, (48, 48, 1)), ("identity_large", 2048, (48, 48, 1)))
ROUND_S = 0.4  # each measurement repeats its operation for about this long per round


def _per_op_us(operation: Callable[[], object], seconds: float = ROUND_S) -> float:
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or count < 3:
        operation()
        count += 1
    return 1e6 * elapsed / count


async def _per_op_async_us(operation: Callable[[], Awaitable[object]], seconds: float = ROUND_S) -> float:
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or count < 3:
        await operation()
        count += 1
    return 1e6 * elapsed / count


async def _access(size: int, rounds: int) -> dict[str, float]:
    path = SHM_ROOT / f"sonic_bench_{uuid.uuid4().hex}"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    registries = {"mapped": SharedMemoryRegistry(), "copied": SharedMemoryRegistry(copy_always=True)}
    try:
        os.ftruncate(fd, 2 * size)
        os.pwrite(fd, np.random.default_rng(0).bytes(size), 0)
        mapping = mmap.mmap(fd, 2 * size)
        output = np.random.default_rng(1).random(size // 4, dtype=np.float32)
        fp32 = dtypes.from_name("FP32")

        def view_before() -> object:
            return np.frombuffer(memoryview(mapping)[0:size], dtype=np.float32)

        def write_before() -> None:
            target = np.frombuffer(memoryview(mapping)[size : 2 * size], dtype=np.uint8)
            target[:] = np.frombuffer(dtypes.array_to_bytes(output, fp32), dtype=np.uint8)

        figures: dict[str, list[float]] = {}
        for _ in range(rounds):
            figures.setdefault("read_before", []).append(_per_op_us(view_before))
            figures.setdefault("write_before", []).append(_per_op_us(write_before))
            for label, registry in registries.items():
                registry.register("bench", f"/{path.name}", 0, 2 * size)
                region = registry.get("bench", "bench")

                async def read_after(region: Region = region) -> object:
                    return np.frombuffer(await region.read(0, size, "bench"), dtype=np.float32)

                async def write_after(region: Region = region) -> None:
                    await write_output(region, size, size, output, fp32, "bench")

                figures.setdefault(f"read_{label}", []).append(await _per_op_async_us(read_after))
                figures.setdefault(f"write_{label}", []).append(await _per_op_async_us(write_after))
                del read_after, write_after, region
                registry.unregister("bench")
            figures.setdefault("touch", []).append(_per_op_us(output.sum))
        del view_before, write_before
        mapping.close()
        return {key: statistics.median(values) for key, values in figures.items()}
    finally:
        for registry in registries.values():
            registry.close()
        os.close(fd)
        path.unlink(missing_ok=True)


def _source_of(commit: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", commit, "src"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def _request_us(address: str, model: str, batch: int, dims: tuple[int, ...], rounds_s: float) -> float:
    shape = [batch, *dims]
    size = int(np.prod(shape)) * 4
    key = f"sonic_bench_{uuid.uuid4().hex}"
    import tritonclient.utils.shared_memory as shm  # noqa: PLC0415  (only this part needs it)

    handle = shm.create_shared_memory_region(key, f"/{key}", 2 * size)
    client = grpcclient.InferenceServerClient(address)
    try:
        shm.set_shared_memory_region(handle, [np.ones(shape, np.float32)])
        client.register_system_shared_memory("bench", f"/{key}", 2 * size)
        tensor = grpcclient.InferInput("INPUT0", shape, "FP32")
        tensor.set_shared_memory("bench", size)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("bench", size, offset=size)
        return _per_op_us(lambda: client.infer(model, [tensor], outputs=[output]), rounds_s)
    finally:
        client.unregister_system_shared_memory()
        client.close()
        shm.destroy_shared_memory_region(handle)


def _requests(before: str, rounds: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repository = write_test_repository(root / "repository", "sonic", MODELS)
        after = Path(__file__).parents[1] / "src"
        variants = {  # label: (source, server arguments)
            "before": (_source_of(before, root / "before"), []),
            "mapped": (after, []),
            "copied": (after, ["--shm-copy-always"]),
        }
        figures: list[dict[str, Any]] = []
        with ServerSet() as servers:
            for label, (src, args) in variants.items():
                env = {**os.environ, "PYTHONPATH": str(src)}
                servers.add(label, ServerProcess.start([repository], extra_args=args, env=env))
            for visit in visits(rounds, REQUESTS, list(servers), how="rotate"):
                model, batch, dims = visit.workload
                name = f"{model} batch {batch} ({batch * int(np.prod(dims)) * 4} B)"
                us = _request_us(servers[visit.server].grpc_address, model, batch, dims, 4 * ROUND_S)
                figures.append({"round": visit.round, "request": name, "server": visit.server, "us": us})
        names = dict.fromkeys(row["request"] for row in figures)
        return {
            name: {
                k: f.median for k, f in per_server([r for r in figures if r["request"] == name], "us").items()
            }
            for name in names
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", default="4ffe123", help="commit whose server maps regions")
    parser.add_argument("--skip-requests", action="store_true")
    args = parser.parse_args(argv)
    access = {str(size): asyncio.run(_access(size, args.rounds)) for size in SIZES}
    print("access, median us per tensor (mapped: an object only the server's user can write; copied: others)")
    columns = (
        "read_before",
        "read_mapped",
        "read_copied",
        "write_before",
        "write_mapped",
        "write_copied",
        "touch",
    )
    print(f"{'bytes':>10} " + " ".join(f"{c:>13}" for c in columns))
    for size, f in access.items():
        print(f"{size:>10} " + " ".join(f"{f[c]:>13.2f}" for c in columns))
    requests: dict[str, dict[str, float]] = {}
    if not args.skip_requests:
        requests = _requests(args.before, args.rounds)
        print("requests (tritonclient gRPC, input and output in shared memory), median us per request:")
        for name, by in requests.items():
            print(f"  {name:<40} " + "  ".join(f"{k} {v:>9.1f}" for k, v in by.items()))
    path = save(
        "shm_access",
        {
            "machine": machine(),
            "rounds": args.rounds,
            "before": args.before,
            "access": access,
            "requests": requests,
        },
    )
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
