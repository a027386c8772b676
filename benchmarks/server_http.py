"""HTTP vs gRPC, metrics on vs off, TLS vs plaintext: server throughput on the same machine.

Workloads: EmTrkMichelId at batch 235 (ProtoDUNE's per-call size; 2.2 MB of FP32 per request, sent
with the binary tensor extension over HTTP and raw contents over gRPC) and, to expose per-request
overhead that the CNN's compute hides, ``identity`` at batch 1 (64 bytes).

Each configuration is a separate ``sonic serve``, all running at once; every round visits each
(configuration, protocol) in a shuffled order for ``--duration-s`` (closed loop: ``--clients``
threads, each with its own client, back to back). Ratios are taken per round (paired), so load
from other users of a shared machine falls on both sides of each ratio alike. Server CPU time
per request (from /proc) is reported beside throughput: it excludes the client's work.

    python benchmarks/server_http.py --repeats 3 --out benchmarks/results/server_http.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import random
import statistics
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
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from benchmarks.harness.processes import cpu_seconds
from sonic.launch import ServerProcess
from sonic.models.build import build_repository
from sonic.models.simple import write_sample_repository

WORKLOADS = {"emtrk_michel": ("main_input", (48, 48, 1), 235), "identity": ("INPUT0", (16,), 1)}


def make_certificates(folder: Path) -> dict[str, Path]:
    """A self-signed CA and a server certificate for 127.0.0.1 (TLS overhead runs)."""
    import ipaddress  # noqa: PLC0415

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench CA")])

    def build(subject: x509.Name, public: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
        return builder.sign(ca_key, hashes.SHA256())

    paths = {"ca": folder / "ca.pem", "cert": folder / "server.pem", "key": folder / "server.key"}
    paths["ca"].write_bytes(build(name, ca_key.public_key(), True).public_bytes(serialization.Encoding.PEM))
    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    paths["cert"].write_bytes(
        build(server_name, key.public_key(), False).public_bytes(serialization.Encoding.PEM)
    )
    paths["key"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


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


CONFIGS: dict[str, Callable[[dict[str, Path]], list[str]]] = {
    "plain": lambda _: ["--http-port", "0"],
    "metrics": lambda _: ["--http-port", "0", "--metrics-port", "0"],
    "tls": lambda certs: [
        "--http-port",
        "0",
        "--tls-cert",
        str(certs["cert"]),
        "--tls-key",
        str(certs["key"]),
    ],
}


def histogram_cost_ns(calls: int = 200_000) -> dict[str, float]:
    """What metrics add per request: ModelStats.record_success with and without latency histograms.

    The nv_* counters cost nothing extra (rendered at scrape time from statistics kept anyway);
    the histograms' per-request observation is the only addition, measured here directly.
    """
    from sonic.server.stats import ModelStats, RequestTiming  # noqa: PLC0415

    timing = RequestTiming(
        queue_ns=12_000, compute_input_ns=3_000, compute_infer_ns=250_000, compute_output_ns=2_000
    )
    result = {}
    for label, histograms in (("off", False), ("on", True)):
        best = float("inf")
        for _ in range(5):
            stats = ModelStats()
            if histograms:
                stats.enable_histograms()
            began = time.perf_counter_ns()
            for index in range(calls):
                stats.record_success(300_000 + index, timing, 1)
            best = min(best, (time.perf_counter_ns() - began) / calls)
        result[f"record_success_{label}_ns"] = best
    result["histogram_added_ns"] = result["record_success_on_ns"] - result["record_success_off_ns"]
    return result


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

    with tempfile.TemporaryDirectory(prefix="sonic-bench-") as tmp:
        folder = Path(tmp)
        repository = args.repository or folder / "repository"
        if args.repository is None or not (repository / "emtrk_michel").is_dir():
            build_repository(repository, ["emtrk_michel"])
        if not (repository / "identity").is_dir():
            write_sample_repository(repository)
        certs = make_certificates(folder)
        runs: list[dict[str, Any]] = []
        # Every configuration's server runs at once (idle ones use no CPU: nothing polls), and each
        # round visits every (configuration, protocol) in a shuffled order: a paired design, so the
        # load other users put on a shared machine falls on all of them alike.
        order = random.Random(7)
        with contextlib.ExitStack() as stack:
            servers = {
                config: stack.enter_context(
                    ServerProcess.start([repository], extra_args=CONFIGS[config](certs))
                )
                for config in args.configs
            }
            for round_index in range(args.repeats):
                for model in args.models:
                    slots = [(config, protocol) for config in args.configs for protocol in ("grpc", "http")]
                    order.shuffle(slots)
                    for config, protocol in slots:
                        server = servers[config]
                        address = server.grpc_address if protocol == "grpc" else server.http_address
                        result = run_load(
                            protocol, address, model, args.clients, args.duration_s,
                            certs if config == "tls" else None, server.pid,
                        )  # fmt: skip
                        run = {"round": round_index, "config": config, "model": model, "protocol": protocol}
                        runs.append(run | result)
                        print(json.dumps(runs[-1]), flush=True)
            if "metrics" in servers:
                with urllib.request.urlopen(
                    f"http://{servers['metrics'].metrics_address}/metrics"
                ) as response:
                    assert b"nv_inference_request_success" in response.read()

    def select(config: str, model: str, protocol: str) -> list[dict[str, Any]]:
        return [
            r for r in runs if r["config"] == config and r["model"] == model and r["protocol"] == protocol
        ]

    def median(config: str, model: str, protocol: str, key: str = "requests_per_s") -> float:
        values = [r[key] for r in select(config, model, protocol)]
        return statistics.median(values) if values else float("nan")

    def paired(model: str, a: tuple[str, str], b: tuple[str, str]) -> dict[str, float]:
        """Per-round throughput ratio a/b: median and range over the rounds."""
        ratios = [
            x["requests_per_s"] / y["requests_per_s"]
            for x, y in zip(select(a[0], model, a[1]), select(b[0], model, b[1]), strict=True)
        ]
        return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}

    def cpu_per_request(config: str, model: str, protocol: str) -> float:
        chosen = select(config, model, protocol)
        cpu_us = sum(r["server_cpu_us_per_request"] * r["requests"] for r in chosen)
        return float(cpu_us / sum(r["requests"] for r in chosen))

    summary: dict[str, Any] = {}
    for model in args.models:
        entry: dict[str, Any] = {}
        for config in args.configs:
            for protocol in ("grpc", "http"):
                entry[f"{config}_{protocol}_req_per_s"] = median(config, model, protocol)
                entry[f"{config}_{protocol}_server_cpu_us_per_req"] = cpu_per_request(config, model, protocol)
        entry["http_over_grpc"] = paired(model, ("plain", "http"), ("plain", "grpc"))
        entry["http_over_grpc_server_cpu"] = cpu_per_request("plain", model, "http") / cpu_per_request(
            "plain", model, "grpc"
        )
        for config in ("metrics", "tls"):
            if config not in args.configs:
                continue
            for protocol in ("grpc", "http"):
                entry[f"{config}_over_plain_{protocol}"] = paired(
                    model, (config, protocol), ("plain", protocol)
                )
                entry[f"{config}_over_plain_{protocol}_server_cpu"] = cpu_per_request(
                    config, model, protocol
                ) / cpu_per_request("plain", model, protocol)
        summary[model] = entry
    micro = histogram_cost_ns()
    for model in args.models:
        for protocol in ("grpc", "http"):
            cpu_us = median("plain", model, protocol, "server_cpu_us_per_request")
            micro[f"histogram_share_of_server_cpu_{model}_{protocol}"] = (
                micro["histogram_added_ns"] / 1000 / cpu_us
            )
    summary["metrics_micro"] = micro
    report = {
        "benchmark": "server_http",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
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
