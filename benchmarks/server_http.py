"""HTTP vs gRPC, metrics on vs off, TLS vs plaintext: server throughput on the same machine.

Workloads: EmTrkMichelId at batch 235 (ProtoDUNE's per-call size; 2.2 MB of FP32 per request, sent
with the binary tensor extension over HTTP and raw contents over gRPC) and, to expose per-request
overhead that the CNN's compute hides, ``identity`` at batch 1 (64 bytes).

Each configuration is a separate ``sonic serve``, all running at once; every round visits each
(configuration, protocol) in a shuffled order for ``--duration-s`` (closed loop: ``--clients``
threads, each with its own client, back to back). Ratios are taken per round (paired), so load
from other users of a shared machine falls on both sides of each ratio alike. Server CPU time
per request (from /proc) is reported beside throughput: it excludes the client's work.

    python -m benchmarks.server_http --repeats 3 --out benchmarks/results/server_http.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from benchmarks.harness.processes import cpu_seconds
from benchmarks.harness.ratios import paired_ratios, per_server
from benchmarks.harness.report import machine
from benchmarks.harness.rounds import visits
from benchmarks.harness.servers import ServerSet
from benchmarks.harness.tls import make_certificates
from benchmarks.metrics_histogram import histogram_cost_ns
from sonic.launch import ServerProcess
from sonic.models.build import build_repository
from sonic.models.simple import write_sample_repository

WORKLOADS = {"emtrk_michel": ("main_input", (48, 48, 1), 235), "identity": ("INPUT0", (16,), 1)}


def make_client(protocol: str, address: str, certs: dict[str, Path] | None) -> Any:
    if protocol == "grpc":
        if certs is None:
            return grpcclient.InferenceServerClient(address)
        return grpcclient.InferenceServerClient(address, ssl=True, root_certificates=str(certs["ca"]))
    if certs is None:
        return httpclient.InferenceServerClient(address, network_timeout=300)
    return httpclient.InferenceServerClient(
        address,
        network_timeout=300,
        ssl=True,
        ssl_options={"ca_certs": str(certs["ca"])},
        insecure=True,  # the certificate names an IP; geventhttpclient checks host names only
    )


def run_load(
    protocol: str,
    address: str,
    model: str,
    clients: int,
    duration_s: float,
    certs: dict[str, Path] | None,
    server_pid: int,
) -> dict[str, float]:
    name, dims, batch = WORKLOADS[model]
    module = grpcclient if protocol == "grpc" else httpclient
    data = np.random.default_rng(0).random((batch, *dims), dtype=np.float32)
    counts = [0] * clients
    latencies: list[list[float]] = [[] for _ in range(clients)]
    start_barrier = threading.Barrier(clients + 1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        client = make_client(protocol, address, certs)
        try:
            tensor = module.InferInput(name, [batch, *dims], "FP32")
            tensor.set_data_from_numpy(data)
            client.infer(model, [tensor])  # warm the connection before timing
            start_barrier.wait()
            while not stop.is_set():
                began = time.perf_counter()
                client.infer(model, [tensor])
                latencies[index].append(time.perf_counter() - began)
                counts[index] += 1
        except BaseException as exc:  # noqa: BLE001  (reported after the run)
            errors.append(exc)
            start_barrier.abort()
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    start_barrier.wait()
    began = time.perf_counter()
    cpu_began = cpu_seconds(server_pid)
    stop.wait(duration_s)  # the measured interval; workers run until told to stop
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    server_cpu_s = cpu_seconds(server_pid) - cpu_began
    if errors:
        raise errors[0]
    all_latencies = sorted(x for part in latencies for x in part)
    total = sum(counts)
    return {
        "requests": total,
        "elapsed_s": elapsed,
        "requests_per_s": total / elapsed,
        # Server CPU per request: steadier than throughput on a shared machine (client work excluded).
        "server_cpu_us_per_request": 1e6 * server_cpu_s / max(1, total),
        "inferences_per_s": total * batch / elapsed,
        "p50_ms": 1000 * all_latencies[len(all_latencies) // 2],
        "p99_ms": 1000 * all_latencies[min(len(all_latencies) - 1, int(len(all_latencies) * 0.99))],
    }


# Each configuration's flags after ``--http-port 0`` (every server serves HTTP beside gRPC).
CONFIGS: dict[str, Callable[[dict[str, Path]], list[str]]] = {
    "plain": lambda _: [],
    "metrics": lambda _: ["--metrics-port", "0"],
    "tls": lambda certs: ["--tls-cert", str(certs["cert"]), "--tls-key", str(certs["key"])],
}


def measure(
    servers: ServerSet, model: str, args: argparse.Namespace, certs: dict[str, Path], rng: random.Random
) -> list[dict[str, Any]]:
    """Every round visits every (configuration, protocol) in a shuffled order: a paired design, so the
    load other users put on a shared machine falls on all of them alike."""
    runs: list[dict[str, Any]] = []
    slots = [f"{config}/{protocol}" for config in args.configs for protocol in ("grpc", "http")]
    for visit in visits(args.repeats, [model], slots, how="shuffle", seed=rng.randrange(1 << 30)):
        slot = visit.server
        config, protocol = slot.split("/")
        server = servers[config]
        assert isinstance(server, ServerProcess)
        address = server.grpc_address if protocol == "grpc" else server.http_address
        tls = certs if config == "tls" else None
        result = run_load(protocol, address, model, args.clients, args.duration_s, tls, server.pid)
        run = {"round": visit.round, "config": config, "model": model, "protocol": protocol, "slot": slot}
        runs.append(run | result)
        print(json.dumps(runs[-1]), flush=True)
    return runs


def summarize(runs: list[dict[str, Any]], models: list[str], configs: list[str]) -> dict[str, Any]:
    """Per model: median req/s and server CPU per request of each (configuration, protocol); paired
    per-round ratios of HTTP to gRPC and of metrics and TLS to plain."""

    def cpu_per_request(mine: list[dict[str, Any]], slot: str) -> float:
        chosen = [r for r in mine if r["slot"] == slot]
        cpu_us = sum(r["server_cpu_us_per_request"] * r["requests"] for r in chosen)
        return float(cpu_us / sum(r["requests"] for r in chosen))

    def paired(mine: list[dict[str, Any]], ours: str, reference: str) -> dict[str, float]:
        ratio = paired_ratios(mine, "requests_per_s", ours, reference, who="slot")
        assert ratio is not None, f"no round measured both {ours} and {reference}"
        return {"median": ratio.median, "min": ratio.min, "max": ratio.max}

    def cpu_ratio(mine: list[dict[str, Any]], ours: str, reference: str) -> float:
        return cpu_per_request(mine, ours) / cpu_per_request(mine, reference)

    summary: dict[str, Any] = {}
    micro = histogram_cost_ns()
    for model in models:
        mine = [r for r in runs if r["model"] == model]
        rates = per_server(mine, "requests_per_s", who="slot")
        entry: dict[str, Any] = {}
        for slot in (f"{c}/{p}" for c in configs for p in ("grpc", "http")):
            entry[f"{slot.replace('/', '_')}_req_per_s"] = rates[slot].median
            entry[f"{slot.replace('/', '_')}_server_cpu_us_per_req"] = cpu_per_request(mine, slot)
        entry["http_over_grpc"] = paired(mine, "plain/http", "plain/grpc")
        entry["http_over_grpc_server_cpu"] = cpu_ratio(mine, "plain/http", "plain/grpc")
        for config in ("metrics", "tls"):
            for protocol in ("grpc", "http") if config in configs else ():
                ours, plain = f"{config}/{protocol}", f"plain/{protocol}"
                entry[f"{config}_over_plain_{protocol}"] = paired(mine, ours, plain)
                entry[f"{config}_over_plain_{protocol}_server_cpu"] = cpu_ratio(mine, ours, plain)
        summary[model] = entry
        cpu = per_server(mine, "server_cpu_us_per_request", who="slot")
        for protocol in ("grpc", "http"):
            share = micro["histogram_added_ns"] / 1000 / cpu[f"plain/{protocol}"].median
            micro[f"histogram_share_of_server_cpu_{model}_{protocol}"] = share
    summary["metrics_micro"] = micro
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repository", type=Path, default=None, help="built repository (default: build one)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/server_http.json"))
    args = parser.parse_args()
    if "plain" not in args.configs:
        parser.error("--configs: the ratios are taken against 'plain'; include it")

    with tempfile.TemporaryDirectory(prefix="sonic-bench-") as tmp:
        folder = Path(tmp)
        repository = args.repository or folder / "repository"
        if args.repository is None or not (repository / "emtrk_michel").is_dir():
            build_repository(repository, ["emtrk_michel"])
        if not (repository / "identity").is_dir():
            write_sample_repository(repository)
        certs = make_certificates(folder)
        runs: list[dict[str, Any]] = []
        rng = random.Random(7)
        # Every configuration's server runs at once (idle ones use no CPU: nothing polls).
        with ServerSet() as servers:
            for config in args.configs:
                flags = ["--http-port", "0", *CONFIGS[config](certs)]
                servers.add(config, ServerProcess.start([repository], extra_args=flags))
            for model in args.models:
                runs += measure(servers, model, args, certs, rng)
            if "metrics" in servers:
                metrics = servers["metrics"]
                assert isinstance(metrics, ServerProcess)
                with urllib.request.urlopen(f"http://{metrics.metrics_address}/metrics") as response:
                    assert b"nv_inference_request_success" in response.read()
    summary = summarize(runs, args.models, args.configs)
    report = {
        "benchmark": "server_http",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "settings": {"repeats": args.repeats, "duration_s": args.duration_s, "clients": args.clients},
        "summary": summary,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
