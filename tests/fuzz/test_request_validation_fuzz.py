"""Fuzzing a decoded request against a loaded model: version strings, then the validation and decoding
of its inputs (``ModelVersion.prepare``: names, datatypes, shapes, batch sizes, tensor bytes).

The model is a real one (the ONNX identity of ``sonic.models.simple``, FP32 [-1, 16], batches up to
1024), loaded once by a real :class:`ModelManager`; requests reach it through the real gRPC and HTTP
codecs, built valid for it and then mutated.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.protocol import grpc_codec, http_json
from sonic.protocol.errors import SonicError
from sonic.protocol.types import InferRequest
from sonic.server.config import ServerConfig
from sonic.server.models.manager import ModelManager
from sonic.server.work import WorkItem
from sonic.testing.fuzz import mutated, one_in, run_bounded

PEAK_BYTES = 4 << 20
FEATURES = 16  # the identity model's INPUT0 is FP32 [16] per sample


@dataclass(frozen=True)
class Served:
    manager: ModelManager
    runner: asyncio.Runner

    def prepare(self, request: InferRequest) -> WorkItem:
        """``ModelVersion.prepare`` on the loop the model was loaded on (it makes the item's future)."""

        async def prepare() -> WorkItem:
            model = self.manager.get(request.model_name, request.model_version)
            return model.prepare(request)

        return self.runner.run(prepare())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("repository")
    identity_model(root / "identity" / "1" / "model.onnx")
    (root / "identity" / "config.pbtxt").write_text(IDENTITY_CONFIG)
    manager = ModelManager(ServerConfig(model_repositories=(root,)))
    with asyncio.Runner() as runner:
        runner.run(manager.load_all())
        yield Served(manager, runner)
        runner.run(manager.close())


@given(
    st.text(max_size=12)
    | st.from_regex(r"\A[0-9]{1,40}\Z")
    | st.builds(lambda n: "9" * n, st.integers(4000, 100_000))
    | st.sampled_from(["1", "\u0661", "\u00b2", "-1", "+1", " 1", "1_0", "0x1", "", "01"])
)
def test_model_version_strings(served: Served, version: str) -> None:
    """A version string names a version or is refused (NOT_FOUND / INVALID_ARGUMENT), whatever it is:
    digit strings past Python's 4300-digit int() limit and digits ``str.isdigit`` takes but int() does
    not (superscripts such as "\u00b2") included (each was answered INTERNAL before the version parser)."""
    run_bounded(
        lambda: served.manager.get("identity", version), allowed=(SonicError,), max_peak_bytes=PEAK_BYTES
    )


shapes = st.one_of(
    st.integers(1, 4).map(lambda batch: [batch, FEATURES]),  # valid
    st.lists(st.integers(-1, 20) | st.sampled_from([1024, 1025, 2**31, 2**62]), max_size=3),
)
names = st.sampled_from(["INPUT0", "INPUT1", "OUTPUT0", ""])
datatypes = st.sampled_from(["FP32", "FP16", "BYTES", "INT32"])
parameters = st.dictionaries(
    st.sampled_from(["priority", "timeout", "sequence_id", "custom"]),
    st.integers(-1, 2**63 - 1) | st.booleans() | st.text(max_size=4),
    max_size=2,
)


@st.composite
def grpc_requests(draw: st.DrawFn) -> bytes:
    """A ModelInfer request for the identity model (inputs, outputs, parameters), then mutated."""
    request = service_pb2.ModelInferRequest(
        model_name="identity", model_version=draw(st.sampled_from(["", "1"]))
    )
    for _ in range(draw(st.sampled_from([1, 2, 0]))):
        shape = draw(shapes)
        valid_shape = all(0 <= d <= 64 for d in shape)
        count = int(np.prod(shape)) if valid_shape else draw(st.integers(0, 8))
        request.inputs.add(
            name=draw(names) if draw(one_in(4)) else "INPUT0",
            datatype=draw(datatypes) if draw(one_in(4)) else "FP32",
            shape=shape,
        )
        size = 4 * count + (draw(st.integers(-4, 4)) if draw(one_in(4)) else 0)
        request.raw_input_contents.append(bytes(max(size, 0)))
    if draw(one_in(3)):
        request.outputs.add(name=draw(names))
    for key, value in draw(parameters).items():
        param = request.parameters[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            param.int64_param = value
        else:
            param.string_param = value
    data = request.SerializeToString()
    return draw(mutated(data)) if draw(one_in(3)) else data


@given(grpc_requests())
def test_grpc_request_against_the_model(served: Served, data: bytes) -> None:
    def decode_and_prepare() -> None:
        item = served.prepare(grpc_codec.decode_infer_request(data))
        assert 1 <= item.batch_size <= 1024
        assert item.inputs["INPUT0"].shape == (item.batch_size, FEATURES)

    run_bounded(decode_and_prepare, allowed=(SonicError,), max_peak_bytes=PEAK_BYTES)


@st.composite
def json_requests(draw: st.DrawFn) -> bytes:
    """The same over HTTP: JSON data (flat or nested) for the identity model, then mutated."""
    inputs: list[dict[str, Any]] = []
    for _ in range(draw(st.sampled_from([1, 2, 0]))):
        shape = draw(shapes)
        count = int(np.prod(shape)) if all(0 <= d <= 64 for d in shape) else draw(st.integers(0, 8))
        values: Any = [0.5] * (count + (draw(st.integers(-2, 2)) if draw(one_in(4)) else 0))
        if draw(one_in(3)) and len(shape) == 2 and len(values) == int(np.prod(shape)) > 0:
            values = np.reshape(values, shape).tolist()
        inputs.append(
            {
                "name": draw(names) if draw(one_in(4)) else "INPUT0",
                "datatype": draw(datatypes) if draw(one_in(4)) else "FP32",
                "shape": shape,
                "data": values,
            }
        )
    body: dict[str, Any] = {"inputs": inputs, "parameters": draw(parameters)}
    if draw(one_in(3)):
        body["outputs"] = [{"name": draw(names)}]
    data = json.dumps(body).encode()
    return draw(mutated(data)) if draw(one_in(4)) else data


@given(json_requests(), st.sampled_from(["", "1"]))
def test_http_request_against_the_model(served: Served, body: bytes, version: str) -> None:
    def decode_and_prepare() -> None:
        request, _ = http_json.decode_infer_request(body, None, "identity", version)
        item = served.prepare(request)
        assert 1 <= item.batch_size <= 1024

    run_bounded(decode_and_prepare, allowed=(SonicError,), max_peak_bytes=PEAK_BYTES)
