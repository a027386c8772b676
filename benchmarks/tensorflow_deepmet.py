"""Served vs direct throughput of the DeepMET-like TensorFlow GraphDef (concurrency 8).

- served over the socket: ``--concurrency`` closed-loop gRPC callers (``benchmarks.harness.load.grpc_load``,
  pre-encoded requests, one event per request, as CMSSW's DeepMET producer sends) against
  ``sonic serve`` with the config's dynamic batching;
- served through ``sonic.client``: ``--concurrency`` tasks calling ``AsyncClient.infer`` with the
  client's defaults, which put the 198 KB of inputs in system shared memory for a server on this host
  (what a job next to its local or fallback server does);
- direct: ``--concurrency`` threads in this process calling the same graph through one TensorFlow
  session (what a framework-side integration would run), one event per call.

Each repeat runs a direct window and a served window back to back (paired). Besides events/s the
script saves the CPU each side spent per event: the direct process's, and for served the server's
and the load generator's (this process). On one machine the load generator's CPU and the transport
of the 198 KB events come out of the same cores the direct side uses for the model alone, so
``served/direct`` is a lower bound for a server on its own machine; ``direct CPU / server CPU`` per
event is the figure for that case (how many events a server core runs per direct-run core).

``--no-merge`` drops the config's ``dynamic_batching`` (Triton's default scheduler: each request
runs alone, as each direct call does). Called directly, this network costs more CPU per event in
larger batches (its per-particle intermediates, 1.2 MB per event, leave the caches), so the flag
shows whether the server's merging costs it (docs/benchmarks.md: it does not, served).

``--direct-batches`` measures the direct side alone at several batch sizes and thread counts (events/s
and CPU µs per event; the same total of events in flight where it can) and writes
``tensorflow_deepmet-direct-batches.json`` instead.

Usage: ``./dev bench tensorflow_deepmet [--seconds 5] [--concurrency 8] [--repeats 3]
[--instances 0] [--intra-threads 0] [--inter-threads 0] [--transport h2|grpcio] [--no-merge]
[--direct-batches]``. Writes ``benchmarks/results/tensorflow_deepmet.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.backends import run_threads
from benchmarks.harness.load import closed_loop, infer_request_bytes, load_with_cpu
from benchmarks.harness.processes import cpu_seconds
from benchmarks.harness.report import machine, save
from sonic.client import AsyncClient, ClientConfig
from sonic.launch import ServerProcess
from sonic.models import deepmet
from sonic.protocol.model_config import parse_config_text, validate_config
from sonic.server.backends.base import InstanceContext
from sonic.server.backends.tensorflow import TensorFlowBackend

OUTPUT = "output/BiasAdd"


def direct_backend(repo: Path) -> TensorFlowBackend:
    config = parse_config_text((repo / "deepmet" / "config.pbtxt").read_text(), "deepmet")
    config.name = "deepmet"
    version_dir = repo / "deepmet" / "1"
    return TensorFlowBackend(
        InstanceContext(
            config=config,
            spec=validate_config(config),
            version=1,
            version_dir=version_dir,
            model_path=version_dir / "model.graphdef",
            instance_name="direct",
            device_kind="cpu",
            device_id=0,
        )
    )


def direct_window(
    backend: TensorFlowBackend, inputs: dict[str, Any], threads: int, seconds: float
) -> tuple[float, float]:
    """``threads`` threads calling ``backend`` with ``inputs`` for ``seconds``: calls/s and CPU µs per call
    of this process (one warm-up call per thread, outside the window, is counted too: it is tiny)."""

    def call() -> None:
        backend.execute(inputs, [OUTPUT])

    cpu = time.process_time()
    calls_per_s = run_threads(threads, seconds, lambda: call)
    return calls_per_s, 1e6 * (time.process_time() - cpu) / (calls_per_s * seconds)


def configure(repo: Path, args: argparse.Namespace, *, merge: bool) -> None:
    """The served and the direct side read the same config: same thread settings on both.

    ``--instances`` 0 leaves the config's default: two instances for a TensorFlow CPU group, as Triton.
    """
    config = repo / "deepmet" / "config.pbtxt"
    text = config.read_text()
    if not merge:
        text = text.replace("dynamic_batching { }", "")
    if args.instances:
        text += f"instance_group [ {{ count: {args.instances} kind: KIND_CPU }} ]\n"
    threads = {"TF_NUM_INTRA_THREADS": args.intra_threads, "TF_NUM_INTER_THREADS": args.inter_threads}
    for key, count in threads.items():
        if count:
            text += f'parameters {{ key: "{key}" value {{ string_value: "{count}" }} }}\n'
    config.write_text(text)


@contextmanager
def deepmet_repository(
    args: argparse.Namespace, *, merge: bool = True
) -> Iterator[tuple[Path, TensorFlowBackend]]:
    """A DeepMET repository configured from the options, and the direct side's backend on it."""
    with tempfile.TemporaryDirectory(prefix="sonic-bench-tf-") as tmp:
        repo = Path(tmp)
        deepmet.write_repository(repo)
        configure(repo, args, merge=merge)
        backend = direct_backend(repo)
        try:
            yield repo, backend
        finally:
            backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--instances", type=int, default=0, help="served model instances (0: default, 2)")
    parser.add_argument("--intra-threads", type=int, default=0, help="TF_NUM_INTRA_THREADS (0: TF's default)")
    parser.add_argument("--inter-threads", type=int, default=0, help="TF_NUM_INTER_THREADS (0: TF's default)")
    parser.add_argument("--transport", default="h2", help="load generator: h2 (sonic's) or grpcio")
    parser.add_argument(
        "--no-merge", action="store_true", help="no dynamic_batching: each request runs alone"
    )
    parser.add_argument("--direct-batches", action="store_true", help="direct side only, by batch size")
    args = parser.parse_args()
    if args.direct_batches:
        direct_batches(args)
        return
    event = deepmet.example_inputs(1, seed=5)
    rounds: list[dict[str, float]] = []
    with deepmet_repository(args, merge=not args.no_merge) as (repo, backend):
        payload = infer_request_bytes("deepmet", event, dict.fromkeys(event, "FP32"))
        with ServerProcess.start([repo]) as server:
            for _ in range(args.repeats):
                direct, direct_cpu_us = direct_window(backend, event, args.concurrency, args.seconds)
                load = load_with_cpu(
                    server.grpc_address,
                    payload,
                    server.pid,
                    concurrency=args.concurrency,
                    window_s=args.seconds,
                    transport=args.transport,
                )
                served = load.result.inferences_per_s
                client_per_s, client_server_cpu_us, client_client_cpu_us = asyncio.run(
                    client_load(server.grpc_address, server.pid, event, args.concurrency, args.seconds)
                )
                rounds.append(
                    {
                        "direct_per_s": direct,
                        "served_per_s": served,
                        "ratio": served / direct,
                        "direct_cpu_us_per_event": direct_cpu_us,
                        "server_cpu_us_per_event": load.server_cpu_us_per_request,
                        "client_cpu_us_per_event": load.client_cpu_us_per_request,
                        "cpu_ratio": direct_cpu_us / load.server_cpu_us_per_request,
                        "client_served_per_s": client_per_s,
                        "client_ratio": client_per_s / direct,
                        "client_server_cpu_us_per_event": client_server_cpu_us,
                        "client_client_cpu_us_per_event": client_client_cpu_us,
                    }
                )
                print(_row(rounds[-1]), flush=True)
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print("median " + _row(medians))
    save(
        "tensorflow_deepmet",
        {
            **vars(args),
            "medians": medians,
            "rounds": rounds,
            "network_hidden": list(deepmet.HIDDEN),
            **machine(),
        },
    )


# (batch, threads): one event per call from 8 threads as the default run, then fewer, larger calls.
DIRECT_SHAPES = ((1, 8), (1, 2), (2, 4), (4, 2), (4, 1), (8, 1), (16, 1))


def direct_batches(args: argparse.Namespace) -> None:
    """The direct side alone: events/s and CPU per event by batch size and calling threads."""
    rows = []
    with deepmet_repository(args) as (_, backend):
        for batch, threads in DIRECT_SHAPES:
            inputs = deepmet.example_inputs(batch, seed=5)
            calls, cpu_us = direct_window(backend, inputs, threads, args.seconds)
            events = calls * batch
            row = {
                "batch": batch,
                "threads": threads,
                "events_per_s": events,
                "cpu_us_per_event": cpu_us / batch,
            }
            rows.append(row)
            print(
                f"| batch {batch} x {threads} threads | {events:.0f} ev/s | {row['cpu_us_per_event']:.0f} µs CPU/ev |"
            )
    save("tensorflow_deepmet-direct-batches", {**vars(args), "rows": rows, **machine()})


async def client_load(
    address: str, pid: int, event: dict[str, Any], concurrency: int, seconds: float
) -> tuple[float, float, float]:
    """``concurrency`` tasks calling ``AsyncClient.infer`` (its defaults), one event a call, for ``seconds``
    after one second of the same load; events/s and the CPU µs per event of the server and this process."""
    async with AsyncClient("deepmet", ClientConfig(servers=(address,), max_in_flight=concurrency)) as client:

        async def call() -> None:
            await client.infer(event, outputs=[OUTPUT])

        # One second of the same load first: connections, regions and the model's metadata, outside the count.
        await closed_loop(call, concurrency, 1.0)
        server_before, client_before = cpu_seconds(pid), time.process_time()
        count, elapsed = await closed_loop(call, concurrency, seconds)
        events = max(count, 1)
        return (
            events / elapsed,
            1e6 * (cpu_seconds(pid) - server_before) / events,
            1e6 * (time.process_time() - client_before) / events,
        )


def _row(r: dict[str, Any]) -> str:
    return (
        f"| direct {r['direct_per_s']:.0f} ev/s, {r['direct_cpu_us_per_event']:.0f} µs CPU/ev "
        f"| served {r['served_per_s']:.0f} ev/s, server {r['server_cpu_us_per_event']:.0f} + load generator "
        f"{r['client_cpu_us_per_event']:.0f} µs CPU/ev | served/direct {r['ratio']:.2f} "
        f"| direct/server CPU per event {r['cpu_ratio']:.2f} "
        f"| sonic.client {r['client_served_per_s']:.0f} ev/s, server {r['client_server_cpu_us_per_event']:.0f} "
        f"+ client {r['client_client_cpu_us_per_event']:.0f} µs CPU/ev, served/direct {r['client_ratio']:.2f} |"
    )


if __name__ == "__main__":
    main()
