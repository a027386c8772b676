"""What the comparison measures: the workloads, which servers each visits, and their inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.models.zoo import ReferenceModel

THREADS = 2  # intra-op threads of every onnxruntime session
# Whether those threads spin-wait for work ("session.intra_op.allow_spinning"), the same in every session.
# Off: on 2 shared cores a spinning pool takes the cycles the server's front end and the load generator
# need between batches (FACILE b16000: sonic's server CPU per request 0.53x with spinning off).
INTRA_OP_SPINNING = 0
ZOO = ("emtrk_michel", "facile", "deepcalo", "resnet_top")
MODELS = (*ZOO, "identity", "identity_large")
LARGE_SHAPE = (1693, 48, 48, 1)
SERVERS = ("direct", "sonic", "sonic-grpcio", "triton", "mlserver")
SERVED = ("sonic", "triton", "mlserver")


@dataclass(frozen=True)
class Workload:
    key: str
    label: str
    model: str
    batch: int
    concurrency: int
    kind: str  # "compute", "rate" or "transfer": which targets apply
    servers: tuple[str, ...]
    # "lean" (pre-serialized, grpc.aio), "native" (pre-serialized, sonic's HTTP/2), "tritonclient", "shm" (lean,
    # with inputs and outputs in system shared memory: sonic perf --shared-memory system), "shm-native" (the
    # same on sonic's HTTP/2, sonic perf's default transport)
    load: str = "lean"
    slow: bool = False  # long executions: longer warm-up and window


WORKLOADS = (
    Workload("emtrk_b1693", "EmTrkMichelId b1693 c2", "emtrk_michel", 1693, 2, "compute", ("direct", *SERVED), slow=True),
    Workload("facile_b16000", "FACILE b16000 c2", "facile", 16000, 2, "compute", ("direct", *SERVED)),
    Workload("resnet_top_b10", "ResNet top b10 c2", "resnet_top", 10, 2, "compute", ("direct", *SERVED), slow=True),
    Workload("deepcalo_b10", "DeepCalo b10 c32", "deepcalo", 10, 32, "rate", SERVERS),
    Workload("facile_b100", "FACILE b100 c32", "facile", 100, 32, "rate", SERVERS),
    Workload("identity_b1", "identity b1 c32", "identity", 1, 32, "rate", SERVERS),
    Workload("identity_b1_tc", "identity b1 c32, tritonclient", "identity", 1, 32, "rate", SERVERS[1:], "tritonclient"),
    Workload("large_15mb", "15.6 MB tensors c1", "identity_large", LARGE_SHAPE[0], 1, "transfer", (*SERVED, "sonic-grpcio"), slow=True),
    # The same with sonic perf's lighter load generator (sonic.client's HTTP/2): no targets, shows what the load costs.
    Workload("identity_b1_native", "identity b1 c32, native load", "identity", 1, 32, "rate", SERVERS[1:], "native"),
    Workload("large_15mb_native", "15.6 MB tensors c1, native load", "identity_large", LARGE_SHAPE[0], 1, "transfer", (*SERVED, "sonic-grpcio"), "native", slow=True),
    # Tensors in system shared memory, no socket copies (issue 37); MLServer has no shared memory.
    Workload("facile_b16000_shm", "FACILE b16000 c2, system shm", "facile", 16000, 2, "compute", ("direct", "sonic", "triton"), "shm"),
    # The same with sonic perf's own default transport: grpc.aio's threads take cycles from onnxruntime's.
    Workload("facile_b16000_shm_native", "FACILE b16000 c2, system shm, native load", "facile", 16000, 2, "compute", ("direct", "sonic", "triton"), "shm-native"),
    Workload("large_15mb_shm", "15.6 MB tensors c1, system shm", "identity_large", LARGE_SHAPE[0], 1, "transfer", ("sonic", "triton"), "shm", slow=True),
    # Issue 37 item 5: every workload it names with both load generators and tritonclient (sonic and Triton;
    # the lean rows above have MLServer too).
    Workload("facile_b100_native", "FACILE b100 c32, native load", "facile", 100, 32, "rate", ("sonic", "triton"), "native"),
    Workload("facile_b100_tc", "FACILE b100 c32, tritonclient", "facile", 100, 32, "rate", ("sonic", "triton"), "tritonclient"),
    Workload("deepcalo_b10_native", "DeepCalo b10 c32, native load", "deepcalo", 10, 32, "rate", ("sonic", "triton"), "native"),
    Workload("deepcalo_b10_tc", "DeepCalo b10 c32, tritonclient", "deepcalo", 10, 32, "rate", ("sonic", "triton"), "tritonclient"),
    Workload("facile_b16000_native", "FACILE b16000 c2, native load", "facile", 16000, 2, "compute", ("direct", "sonic", "triton"), "native"),
    Workload("facile_b16000_tc", "FACILE b16000 c2, tritonclient", "facile", 16000, 2, "compute", ("direct", "sonic", "triton"), "tritonclient"),
    Workload("large_15mb_tc", "15.6 MB tensors c1, tritonclient", "identity_large", LARGE_SHAPE[0], 1, "transfer", ("sonic", "triton"), "tritonclient", slow=True),
)  # fmt: skip


def make_inputs(workload: Workload, models: dict[str, ReferenceModel]) -> dict[str, npt.NDArray[Any]]:
    rng = np.random.default_rng(0)
    if workload.model == "identity":
        return {"INPUT0": np.ones((workload.batch, 16), np.float32)}
    if workload.model == "identity_large":
        return {"INPUT0": rng.standard_normal(LARGE_SHAPE).astype(np.float32)}
    return {
        k: np.ascontiguousarray(v) for k, v in models[workload.model].make_inputs(workload.batch, rng).items()
    }
