"""Servers, model folders and stream reading shared by the decoupled-model parity tests
(test_decoupled_parity.py, test_decoupled_bls_parity.py): sonic with each gRPC front end and real NVIDIA
Triton 2.51 serve the same folders; streams are read with the raw gRPC stub, field by field."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
from tests.integration.triton_helpers import Endpoint, serving
from tritonclient.grpc import service_pb2, service_pb2_grpc

PYTHON_MODELS = Path(__file__).parent / "python_models"
DECOUPLED = "model_transaction_policy { decoupled: true }"
CONFIGS = {
    "repeat_int32": f"""name: "repeat_int32"
backend: "python"
max_batch_size: 0
{DECOUPLED}
input [
  {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }},
  {{ name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] }},
  {{ name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }}
]
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }}
]
""",
    "square_int32": f"""name: "square_int32"
backend: "python"
max_batch_size: 0
{DECOUPLED}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
""",
    "decoupled_probe": f"""name: "decoupled_probe"
backend: "python"
max_batch_size: 0
{DECOUPLED}
input [ {{ name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }},
  {{ name: "MSG" data_type: TYPE_STRING dims: [ -1 ] }}
]
""",
    "bls_decoupled": """name: "bls_decoupled"
backend: "python"
max_batch_size: 0
input [
  { name: "N" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "COUNT" data_type: TYPE_INT32 dims: [ 2 ] },
  { name: "MSG" data_type: TYPE_STRING dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 2 } ]
""",
}


def write_repository(root: Path) -> Path:
    repo = root / "models"
    for name, config in CONFIGS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config, encoding="utf-8")
        (repo / name / "1" / "model.py").write_bytes((PYTHON_MODELS / f"{name}.py").read_bytes())
    return repo


# sonic with each gRPC front end, and real Triton 2.51
SERVERS = ["sonic", "sonic-grpcio", pytest.param("triton", marks=pytest.mark.triton)]


def endpoints(kind: str, repository: Path) -> Iterator[Endpoint]:
    """One started server of ``kind`` (of :data:`SERVERS`) on ``repository``, stopped after use."""
    with serving(kind, repository, list(CONFIGS)) as endpoint:
        yield endpoint


# --- streams, read field by field ------------------------------------------------------------------------

Message = tuple[
    str, str, str, bool | None, str, tuple[tuple[str, str, tuple[int, ...], tuple[Any, ...]], ...]
]
NUMPY = {"INT32": np.int32, "UINT32": np.uint32}


def _bytes_items(raw: bytes) -> tuple[str, ...]:
    items, offset = [], 0
    while offset < len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        items.append(raw[offset + 4 : offset + 4 + length].decode())
        offset += 4 + length
    return tuple(items)


def read_message(message: Any) -> Message:
    """(id, model name, model version, triton_final_response, error message, outputs)."""
    head = message.infer_response
    final = (
        head.parameters["triton_final_response"].bool_param
        if "triton_final_response" in head.parameters
        else None
    )
    outputs = []
    for index, tensor in enumerate(head.outputs):
        raw = head.raw_output_contents[index]
        values = (
            _bytes_items(raw)
            if tensor.datatype == "BYTES"
            else tuple(np.frombuffer(raw, NUMPY[tensor.datatype]).tolist())
        )
        outputs.append((tensor.name, tensor.datatype, tuple(tensor.shape), values))
    return head.id, head.model_name, head.model_version, final, message.error_message, tuple(outputs)


def infer_request(
    model: str, request_id: str, inputs: dict[str, npt.NDArray[Any]], *, empty_final: bool = False
) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    for name, array in inputs.items():
        request.inputs.add(name=name, datatype=str(array.dtype).upper(), shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    if empty_final:
        request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


def stream(server: Endpoint, requests: Sequence[service_pb2.ModelInferRequest]) -> list[Message]:
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return [read_message(m) for m in stub.ModelStreamInfer(iter(requests), timeout=60)]


def by_id(messages: list[Message]) -> dict[str, list[Message]]:
    grouped: dict[str, list[Message]] = {}
    for message in messages:
        grouped.setdefault(message[0], []).append(message)
    return grouped


def probe(mode: int) -> dict[str, npt.NDArray[Any]]:
    return {"MODE": np.array([mode], np.int32)}


def i32(*values: int) -> tuple[str, str, tuple[int, ...], tuple[int, ...]]:
    return ("OUT", "INT32", (len(values),), values)
