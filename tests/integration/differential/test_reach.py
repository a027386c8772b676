"""sonic against real Triton 2.51 where the generated requests do not reach: loads, decoupled models, CUDA
shared memory, shared-memory keys.

One pair of servers (explicit model control) on a repository of :mod:`faulty_models`: each test sends
one call (or the same call over gRPC and HTTP) with one fault, as the single faults of
``test_differential`` do, so the message is compared, not only the status: the load of a model whose
configuration or code is broken in one way, an inference through the unary calls to a decoupled model,
CUDA shared-memory calls to a server that has none, a system shared-memory key that cannot be opened.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from tests.integration.differential.calls import Call, GrpcCall, HttpCall
from tests.integration.differential.compare import Both, Session
from tests.integration.differential.faulty_models import DECOUPLED, FAULTY, write_faulty
from tests.integration.differential.repository import SPARE, write_repository
from tests.integration.differential.servers import both_of, start_pair
from tritonclient.grpc import service_pb2

pytestmark = [pytest.mark.integration, pytest.mark.triton]

ARGS = (
    "--model-control-mode=explicit",
    f"--load-model={SPARE.name}",
    f"--load-model={DECOUPLED.name}",
    "--exit-on-error=false",
    "--strict-readiness=false",
)
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def reach(tmp_path_factory: pytest.TempPathFactory, differential_session: Session) -> Iterator[Both]:
    root = write_repository(tmp_path_factory.mktemp("reach") / "models", (SPARE,))
    write_faulty(root)
    with ExitStack() as stack:
        pair = start_pair(
            stack,
            root,
            [SPARE.name, DECOUPLED.name],
            triton_args=ARGS,
            sonic_args=ARGS,
            replaying=differential_session.replaying,
        )
        both = both_of(pair, differential_session)
        stack.callback(both.close)
        yield both


def _load(name: str) -> list[Call]:
    message = service_pb2.RepositoryModelLoadRequest(model_name=name)
    return [
        GrpcCall("RepositoryModelLoad", message.SerializeToString(), what=f"load {name}", faults=1),
        HttpCall("POST", f"/v2/repository/models/{name}/load", what=f"load {name}", faults=1),
    ]


@pytest.mark.parametrize("name", [m.name for m in FAULTY])
def test_load_fault(reach: Both, name: str) -> None:
    for call in _load(name):
        reach.compare(call)


def test_load_bad_name(reach: Both) -> None:
    reach.compare(_load("bad name")[0])


def test_decoupled_unary(reach: Both) -> None:
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    reach.compare(
        HttpCall("POST", f"/v2/models/{DECOUPLED.name}/infer", json.dumps(body).encode(), JSON, faults=1)
    )
    request = service_pb2.ModelInferRequest(model_name=DECOUPLED.name)
    request.inputs.add(name="X", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
    reach.compare(GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1))


def test_cuda_shared_memory(reach: Both) -> None:
    register = {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 8}
    calls: list[Call] = [
        HttpCall("GET", "/v2/cudasharedmemory/region/absent/status"),
        GrpcCall(
            "CudaSharedMemoryStatus",
            service_pb2.CudaSharedMemoryStatusRequest(name="absent").SerializeToString(),
        ),
        HttpCall("POST", "/v2/cudasharedmemory/region/r/register", json.dumps(register).encode(), JSON),
        GrpcCall(
            "CudaSharedMemoryRegister",
            service_pb2.CudaSharedMemoryRegisterRequest(
                name="r", raw_handle=b"AAAA", device_id=0, byte_size=8
            ).SerializeToString(),
        ),
    ]
    for call in calls:
        reach.compare(call)


@pytest.mark.parametrize("key", ["/a/b", "/" + "k" * 300, "/absent_key"])
def test_shared_memory_key(reach: Both, key: str) -> None:
    message = service_pb2.SystemSharedMemoryRegisterRequest(name="r", key=key, offset=0, byte_size=8)
    reach.compare(GrpcCall("SystemSharedMemoryRegister", message.SerializeToString(), faults=1))
