"""One window of one workload on one server (or the direct ceiling), and the rounds that visit them all.

Every server is started once and stays up; each round visits every (workload, server) pair with the
server order rotated between rounds (``benchmarks.harness.rounds``). A server that died (MLServer under
15.6 MB tensors, past its memory cap) is restarted and the restart recorded.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy.typing as npt
import onnxruntime as ort
from tritonclient.utils import np_to_triton_dtype

from benchmarks.compare.repositories import build_repositories
from benchmarks.compare.servers import NAMES, start_server
from benchmarks.compare.workloads import INTRA_OP_SPINNING, THREADS, WORKLOADS, Workload, make_inputs
from benchmarks.harness.load import (
    LoadResult,
    SharedMemoryLoad,
    grpc_load,
    infer_request_bytes,
    tritonclient_once,
    tritonclient_run,
)
from benchmarks.harness.processes import cpu_seconds, memcpy_floor_s, tree_cpu_seconds
from benchmarks.harness.rounds import visits
from benchmarks.harness.servers import ServerSet
from sonic.cli.event_loop import loop_factory
from sonic.models.zoo import registry

# A call's deadline: the slowest answers here take ~2 s (EmTrkMichelId on MLServer); a server that stops
# answering (MLServer did, once, on DeepCalo at 32 in flight) then costs a minute per window, not ten.
CALL_TIMEOUT_S = 60.0


def direct_run(
    session: ort.InferenceSession,
    feeds: dict[str, npt.NDArray[Any]],
    batch: int,
    window_s: float,
    warmup_s: float,
) -> dict[str, float]:
    start = time.perf_counter()
    while time.perf_counter() - start < warmup_s:
        session.run(None, feeds)
    count = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < window_s or count < 2:
        session.run(None, feeds)
        count += 1
    return {"requests_per_s": count / elapsed, "inferences_per_s": count * batch / elapsed, "requests": count}


def measure(
    workload: Workload,
    server: str,
    addresses: dict[str, str],
    feeds: dict[str, npt.NDArray[Any]],
    sessions: dict[str, ort.InferenceSession],
    window_s: float,
    pid: int | None,
) -> dict[str, float]:
    """One window of ``workload`` on ``server`` after a warm-up window of its own, and the server's CPU
    over the measured window alone (``server_cpu_s``; this process's for direct). The warm-up used to
    share the CPU count while only the window's requests were counted: every CPU figure read 1.33x high
    (2 s of warm-up before 6 s windows for the slow workloads, 1 s before 3 s for the others)."""
    warmup_s = 2.0 if workload.slow else 1.0
    window_s = window_s * 2 if workload.slow else window_s
    _window(workload, server, addresses, feeds, sessions, warmup_s)
    before = server_cpu(pid)
    result = _window(workload, server, addresses, feeds, sessions, window_s)
    return {**result, "server_cpu_s": server_cpu(pid) - before}


def _window(
    workload: Workload,
    server: str,
    addresses: dict[str, str],
    feeds: dict[str, npt.NDArray[Any]],
    sessions: dict[str, ort.InferenceSession],
    window_s: float,
) -> dict[str, float]:
    if server == "direct":
        return direct_run(sessions[workload.model], feeds, workload.batch, window_s, 0.0)
    if workload.load == "tritonclient":
        return asyncio.run(
            tritonclient_run(
                addresses[server], workload.model, feeds, workload.concurrency, window_s, 0.0, CALL_TIMEOUT_S
            )
        )
    payload: bytes | SharedMemoryLoad
    if workload.load.startswith("shm"):
        # Regions of this process, created and registered with this server for this window alone, then
        # unregistered and unlinked (sonic and Triton are separate processes: each maps its own).
        payload = SharedMemoryLoad(workload.model, feeds)
    else:
        datatypes = {name: np_to_triton_dtype(array.dtype) for name, array in feeds.items()}
        payload = infer_request_bytes(workload.model, feeds, datatypes)
    native = workload.load in {"native", "shm-native"}
    # sonic perf's own transport on the loop sonic perf runs (uvloop); grpc.aio on the standard one, as
    # tritonclient's users run it.
    try:
        with asyncio.Runner(loop_factory=loop_factory("uvloop" if native else "asyncio")) as runner:
            result = runner.run(
                grpc_load(
                    addresses[server],
                    payload,
                    concurrency=workload.concurrency,
                    batch=workload.batch,
                    duration_s=window_s,
                    warmup_s=0.0,
                    transport="h2" if native else "grpcio",
                    timeout_s=CALL_TIMEOUT_S,
                )
            )
    except RuntimeError as exc:  # no request completed within the window: the server is that slow
        print(f"    {server} {workload.key}: {exc}", flush=True)
        return {"requests_per_s": 0.0, "inferences_per_s": 0.0, "requests": 0}
    rate = requests_per_s(workload, result)
    return {
        "requests_per_s": round(rate, 3),
        "inferences_per_s": round(rate * workload.batch, 3),
        "requests_per_s_counted": result.requests_per_s,
        "requests": result.requests,
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
        "mean_ms": result.mean_ms,
    }


def requests_per_s(workload: Workload, result: LoadResult) -> float:
    """A served window's rate: requests completed in it per second, or, for the slow compute workloads,
    ``concurrency`` over the mean latency."""
    if workload.slow and workload.kind == "compute" and result.mean_ms > 0:
        # A few requests per window (EmTrkMichelId: 18 or 19 in 6 s) make a whole-request count move in
        # steps of ~5 %; a closed loop keeps ``concurrency`` requests in flight, so Little's law gives the
        # rate from their mean latency, without the steps (the count is kept beside it). Only where a
        # request takes far longer than the load generator's own work between two (0.1-0.7 s here): the
        # latency leaves that work out, which for 15.6 MB answers (parsed after the clock stops) is not small.
        return workload.concurrency / (result.mean_ms / 1e3)
    return result.requests_per_s


def server_cpu(pid: int | None) -> float:
    """A server's CPU is its whole process tree (Triton's Python-backend stubs, MLServer's workers); the
    direct ceiling (``pid`` None) runs in this process, whose children are the servers: itself only."""
    return tree_cpu_seconds(pid) if pid is not None else cpu_seconds(os.getpid())


def memcpy_floor_ms(feeds: dict[str, dict[str, npt.NDArray[Any]]]) -> dict[str, float]:
    """Per transfer workload, the memcpy floor of its request tensor (``memcpy_floor_s``), in ms."""
    transfers = {w.key for w in WORKLOADS if w.kind == "transfer"}
    return {
        key: round(1e3 * memcpy_floor_s(arrays["INPUT0"]), 3)
        for key, arrays in feeds.items()
        if key in transfers
    }


def sessions_for(workloads: Sequence[Workload], repository: Any) -> dict[str, ort.InferenceSession]:
    """The direct ceiling's onnxruntime sessions, set up as every server's."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.add_session_config_entry("session.intra_op.allow_spinning", str(INTRA_OP_SPINNING))
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return {
        name: ort.InferenceSession(
            str(repository / name / "1" / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        for name in {w.model for w in workloads}
    }


def run(
    rounds: int, window_s: float, only: set[str] | None, servers_wanted: Sequence[str] = NAMES
) -> dict[str, Any]:
    repositories = build_repositories()
    models = registry()
    workloads = [w for w in WORKLOADS if only is None or w.key in only]
    feeds = {w.key: make_inputs(w, models) for w in workloads}
    sessions = sessions_for(workloads, repositories["sonic"])
    measured = {"direct", *servers_wanted}
    rows: list[dict[str, Any]] = []
    restarts: list[dict[str, Any]] = []
    with ServerSet() as running:
        for name in servers_wanted:
            running.add(name, start_server(name, repositories))
        for workload in workloads:  # first-call costs stay out of every window
            for server in workload.servers:
                if server in running:
                    asyncio.run(
                        tritonclient_once(running[server].grpc_address, workload.model, feeds[workload.key])
                    )

        def servers_of(workload: Workload) -> list[str]:
            return [s for s in workload.servers if s in measured]

        for visit in visits(rounds, workloads, servers_of, how="rotate"):
            workload, server = visit.workload, visit.server
            if server in running and (code := running[server].process.poll()) is not None:
                # MLServer was OOM-killed by 15.6 MB tensors in trial runs: restart, and say so.
                print(f"    {server} exited with code {code}: restarting it", flush=True)
                restarts.append(
                    {"round": visit.round, "workload": workload.key, "server": server, "exit_code": code}
                )
                running.replace(server, start_server(server, repositories))
            pid = running[server].pid if server in running else None
            addresses = running.addresses()
            load_before = os.getloadavg()[0]
            result = measure(workload, server, addresses, feeds[workload.key], sessions, window_s, pid)
            row = {
                "round": visit.round,
                "workload": workload.key,
                "server": server,
                **{k: round(v, 3) for k, v in result.items()},
                "load_average": round((load_before + os.getloadavg()[0]) / 2, 2),
            }
            if workload.kind == "transfer":
                row["MB_per_s"] = round(
                    result["requests_per_s"] * feeds[workload.key]["INPUT0"].nbytes / 1e6, 1
                )
            rows.append(row)
            shown = (
                f"{row['MB_per_s']:8.0f} MB/s"
                if "MB_per_s" in row
                else f"{result['inferences_per_s']:10.0f} inf/s"
            )
            print(
                f"[{visit.round}] {workload.label:32s} {server:13s} {shown} {result['requests_per_s']:8.0f} req/s "
                f"(load {row['load_average']})",
                flush=True,
            )
    return {
        "threads": THREADS,
        "intra_op_spinning": INTRA_OP_SPINNING,
        "rounds": rounds,
        "window_s": window_s,
        "servers": ["direct", *servers_wanted],
        "cores": "not pinned: servers, load generator and direct runs share the 2 cores (and other users' jobs)",
        "workloads": [vars(w) for w in workloads],
        "restarts": restarts,
        "memcpy_floor_ms": memcpy_floor_ms(feeds),
        "rows": rows,
    }
