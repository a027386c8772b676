"""The gRPC method table: every unary method of Triton's service that sonic serves, each answering with a
message of its response type (or refusing with a sonic error), over a real data plane."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tritonclient.grpc import service_pb2

from sonic.protocol.errors import SonicError
from sonic.server.config import ServerConfig
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.grpc_methods import GrpcMethods
from sonic.server.models.manager import ModelManager

pytestmark = pytest.mark.unit

SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
NOT_UNARY_HERE = {"ModelInfer", "ModelStreamInfer"}  # inference: their own paths


def test_the_table_holds_every_unary_method_of_the_service_with_its_types() -> None:
    config = ServerConfig(model_repositories=(Path("/nonexistent"),))
    methods = GrpcMethods(DataPlane(config, ModelManager(config)))
    assert set(methods.unary) == {m.name for m in SERVICE.methods} - NOT_UNARY_HERE
    for method in SERVICE.methods:
        if method.name in methods.unary:
            entry = methods.unary[method.name]
            assert entry.request_type.DESCRIPTOR is method.input_type
            assert entry.response_type.DESCRIPTOR is method.output_type


def test_each_method_answers_its_response_type_or_a_sonic_error(tmp_path: Path) -> None:
    config = ServerConfig(model_repositories=(tmp_path,))
    dataplane = DataPlane(config, ModelManager(config))
    dataplane.accepting = True
    methods = GrpcMethods(dataplane)

    async def call_all() -> dict[str, object]:
        answers: dict[str, object] = {}
        for name, method in methods.unary.items():
            try:
                answers[name] = await method.handler(method.request_type())
            except SonicError as exc:
                answers[name] = exc
        return answers

    answers = asyncio.run(call_all())
    for name, answer in answers.items():
        if not isinstance(answer, SonicError):
            assert isinstance(answer, methods.unary[name].response_type), name
    assert isinstance(answers["CudaSharedMemoryRegister"], SonicError)  # no CUDA regions: UNIMPLEMENTED
    assert isinstance(answers["ServerLive"], service_pb2.ServerLiveResponse)
    assert isinstance(answers["LogSettings"], service_pb2.LogSettingsResponse)
