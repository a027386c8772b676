"""Deployment benchmark (issue 15): `sonic deploy local` with N replicas behind a real Envoy.

(a) throughput at concurrency 32 for a small request (identity FP32 [1, 16]: per-request overhead)
    and a compute-bound one (`slow`, tanh(x W) layers on [1, 512]): direct to one replica, through
    Envoy to N replicas, and direct to N replicas with the load split by the caller (no proxy);
(b) Envoy's added latency per request: identity at concurrency 1, p50/p99 through Envoy minus direct;
(c) recovery: 32 callers through Envoy (sonic.client), one replica SIGKILLed: completed calls per
    100 ms before and after, failed calls, and the time until throughput is back to 90 % of the
    level the surviving replicas sustain.
Writes benchmarks/results/deploy.json and docs/deployment.png.

    ./dev bench deploy [--replicas 2] [--seconds 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.load import grpc_load, infer_request_bytes
from benchmarks.harness.report import machine, save
from sonic.client import AsyncClient, ClientConfig
from sonic.deploy.local import LocalSettings, LocalStack
from sonic.models.simple import write_sample_repository
from sonic.models.testing import slow_model

CONCURRENCY = 32
FIGURE = Path(__file__).parent.parent / "docs" / "deployment.png"
SLOW_CONFIG = (
    "max_batch_size: 64\n"
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 512 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 512 ] } ]\n'
    "dynamic_batching { }\n"
)
WIDTH = {"identity": 16, "slow": 512}


def repository(root: Path) -> Path:
    write_sample_repository(root)
    slow_model(root / "slow" / "1" / "model.onnx")  # tens of ms per batch of 64
    (root / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    return root


def payload(model: str) -> bytes:
    inputs = {"INPUT0": np.ones((1, WIDTH[model]), dtype=np.float32)}
    return infer_request_bytes(model, inputs, {"INPUT0": "FP32"})


async def split_load(addresses: list[str], body: bytes, seconds: float) -> float:
    """Requests/s of CONCURRENCY callers split evenly over ``addresses``, all at once."""
    share = CONCURRENCY // len(addresses)
    results = await asyncio.gather(
        *(
            grpc_load(a, body, concurrency=share, batch=1, duration_s=seconds, warmup_s=0.5, transport="h2")
            for a in addresses
        )
    )
    return round(sum(r.requests_per_s for r in results), 1)


async def throughput(stack: LocalStack, seconds: float) -> dict[str, Any]:
    replicas = [r.grpc_address for r in stack.replicas]
    rows: dict[str, Any] = {}
    for model in ("identity", "slow"):
        body = payload(model)

        async def load(address: str, concurrency: int = CONCURRENCY, body: bytes = body) -> Any:
            return await grpc_load(
                address,
                body,
                concurrency=concurrency,
                batch=1,
                duration_s=seconds,
                warmup_s=0.5,
                transport="h2",
            )

        rows[model] = {
            "direct_one_replica_rps": (await load(replicas[0])).requests_per_s,
            "envoy_n_replicas_rps": (await load(stack.envoy_address)).requests_per_s,
            "direct_n_replicas_split_rps": await split_load(replicas, body, seconds),
        }
        print(model, rows[model], flush=True)
    direct, envoy = await load_pair(stack, seconds)
    rows["latency_c1"] = {
        "direct_p50_ms": direct.p50_ms,
        "envoy_p50_ms": envoy.p50_ms,
        "direct_p99_ms": direct.p99_ms,
        "envoy_p99_ms": envoy.p99_ms,
        "envoy_added_p50_ms": round(envoy.p50_ms - direct.p50_ms, 3),
    }
    print("latency", rows["latency_c1"], flush=True)
    return rows


async def load_pair(stack: LocalStack, seconds: float) -> tuple[Any, Any]:
    body = payload("identity")
    results = [
        await grpc_load(
            address, body, concurrency=1, batch=1, duration_s=seconds, warmup_s=0.5, transport="h2"
        )
        for address in (stack.replicas[0].grpc_address, stack.envoy_address)
    ]
    return results[0], results[1]


async def recovery(stack: LocalStack, before_s: float, after_s: float) -> dict[str, Any]:
    """Completion times of 32 callers through Envoy; one replica SIGKILLed ``before_s`` in."""
    inputs = {"INPUT0": np.ones((1, 16), dtype=np.float32)}
    done: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    end = start + before_s + after_s

    async def caller(client: AsyncClient) -> None:
        while time.perf_counter() < end:
            try:
                await client.infer(inputs)
            except Exception as exc:  # noqa: BLE001  (counted: the figure reports failed calls)
                errors.append(repr(exc))
            else:
                done.append(time.perf_counter() - start)

    async def killer() -> None:
        await asyncio.sleep(before_s)  # the benchmark's own schedule: kill at a fixed time into the run
        os.kill(stack.replicas[0].pid, signal.SIGKILL)

    async with AsyncClient("identity", ClientConfig(servers=(stack.envoy_address,))) as client:
        await asyncio.gather(killer(), *(caller(client) for _ in range(CONCURRENCY)))
    stack.replicas[0].process.wait()
    bucket = 0.1
    buckets = int((before_s + after_s) / bucket)  # the last, partial bucket is left out
    counts = np.bincount((np.array(done) / bucket).astype(int), minlength=buckets)[:buckets]
    kill_bucket = int(before_s / bucket)
    settled = float(np.median(counts[kill_bucket + int(1.0 / bucket) :]))  # survivors' level, 1 s after
    back = next((i for i in range(kill_bucket, len(counts)) if counts[i] >= 0.9 * settled), len(counts))
    return {
        "bucket_s": bucket,
        "kill_at_s": before_s,
        "completed_per_bucket": counts.tolist(),
        "failed_calls": len(errors),
        "errors": errors[:5],
        "before_per_s": round(float(np.median(counts[:kill_bucket])) / bucket, 1),
        "after_per_s": round(settled / bucket, 1),
        "back_to_90pct_after_s": round((back - kill_bucket) * bucket, 2),
    }


def plot(results: dict[str, Any], replicas: int) -> None:
    import matplotlib as mpl  # noqa: PLC0415  (a dev dependency, only needed here)

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    labels = ["direct, 1 replica", f"Envoy, {replicas} replicas", f"direct, {replicas} replicas split"]
    keys = ["direct_one_replica_rps", "envoy_n_replicas_rps", "direct_n_replicas_split_rps"]
    for offset, model in enumerate(("identity", "slow")):
        values = [results["throughput"][model][k] for k in keys]
        axes[0].bar(np.arange(3) + 0.4 * offset, values, width=0.4, label=model)
    axes[0].set_xticks(np.arange(3) + 0.2, labels, fontsize=8)
    axes[0].set_ylabel("requests/s, 32 callers")
    axes[0].set_yscale("log")
    axes[0].legend()
    axes[0].set_title("Throughput")
    latency = results["throughput"]["latency_c1"]
    axes[1].bar(["direct p50", "Envoy p50", "direct p99", "Envoy p99"],
                [latency["direct_p50_ms"], latency["envoy_p50_ms"], latency["direct_p99_ms"], latency["envoy_p99_ms"]])  # fmt: skip
    axes[1].set_ylabel("ms per request, 1 caller")
    axes[1].set_title(f"Envoy adds {latency['envoy_added_p50_ms']:.3f} ms (p50)")
    rec = results["recovery"]
    counts = np.array(rec["completed_per_bucket"]) / rec["bucket_s"]
    axes[2].plot(np.arange(len(counts)) * rec["bucket_s"], counts)
    axes[2].axvline(rec["kill_at_s"], color="red", linestyle="--", label="replica SIGKILLed")
    axes[2].set_xlabel("s")
    axes[2].set_ylabel("completed calls/s")
    axes[2].set_title(f"Recovery: {rec['failed_calls']} failed calls")
    axes[2].legend()
    figure.suptitle(f"sonic deploy local on {os.cpu_count()} CPUs (no GPU; replicas share the CPUs)")
    figure.tight_layout()
    figure.savefig(FIGURE, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--quick", action="store_true", help="1 s windows (a smoke run)")
    args = parser.parse_args()
    seconds = 1.0 if args.quick else args.seconds
    with tempfile.TemporaryDirectory(prefix="sonic-bench-deploy-") as tmp:
        repo = repository(Path(tmp) / "repository")
        settings = LocalSettings(
            repositories=(repo,), replicas=args.replicas, envoy_port=0, workdir=Path(tmp) / "a"
        )
        with LocalStack.start(settings) as stack:
            rows = asyncio.run(throughput(stack, seconds))
        settings = LocalSettings(
            repositories=(repo,), replicas=args.replicas + 1, envoy_port=0, workdir=Path(tmp) / "b"
        )
        with LocalStack.start(settings) as stack:
            rec = asyncio.run(recovery(stack, before_s=2 * seconds, after_s=3 * seconds))
        print("recovery", {k: v for k, v in rec.items() if k != "completed_per_bucket"}, flush=True)
    results = {
        "machine": machine(),
        "replicas": args.replicas,
        "concurrency": CONCURRENCY,
        "throughput": rows,
        "recovery": rec,
    }
    print(save("deploy", results))
    plot(results, args.replicas)
    print(FIGURE)


if __name__ == "__main__":
    main()
