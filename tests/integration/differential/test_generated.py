"""sonic against real Triton 2.51 on generated repositories: configuration features and what a model returns.

One pair of servers per repository (:func:`generated.seeds`: one in CI, ``SONIC_DIFFERENTIAL_REPOSITORIES=N``
for N fresh ones), started once; the tests send many generated requests to it. The budgets and reports
are those of ``test_differential`` (:mod:`compare`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.integration.differential.calls import Call, GrpcCall, HttpCall
from tests.integration.differential.compare import Both, Session, budget
from tests.integration.differential.generated import (
    RETURNS,
    generated_models,
    returns_cases,
    seeds,
    write_generated,
)
from tests.integration.differential.repository import ModelSpec
from tests.integration.differential.requests import InferCase, infer_grpc, infer_http
from tests.integration.differential.servers import both_of, start_pair
from tests.integration.differential.single_faults import single_fault_calls
from tests.integration.differential.strategies import infer_cases
from tritonclient.grpc import service_pb2

pytestmark = [pytest.mark.integration, pytest.mark.triton]


@dataclass
class Generated:
    both: Both
    models: tuple[ModelSpec, ...]


@pytest.fixture(scope="module", params=seeds(), ids=lambda seed: f"seed{seed}")
def generated(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, differential_session: Session
) -> Iterator[Generated]:
    models = generated_models(request.param)
    repository = write_generated(tmp_path_factory.mktemp(f"generated{request.param}") / "models", models)
    names = [m.name for m in (*models, RETURNS)]
    with ExitStack() as stack:
        pair = start_pair(stack, repository, names, replaying=differential_session.replaying)
        both = both_of(pair, differential_session)
        stack.callback(both.close)
        yield Generated(both, models)


@budget(40)
@given(data=st.data(), binary=st.booleans())
def test_generated_infer(generated: Generated, data: st.DataObject, binary: bool) -> None:
    case = data.draw(infer_cases(generated.models))
    generated.both.compare(infer_grpc(case))
    generated.both.compare(infer_http(case, binary_output=binary))


@budget(40)
@given(data=st.data())
def test_generated_single_fault(generated: Generated, data: st.DataObject) -> None:
    generated.both.compare(data.draw(single_fault_calls(generated.models)))


def test_generated_configs(generated: Generated) -> None:
    # The configuration and metadata of each generated model, as each server completes them.
    for model in (*generated.models, RETURNS):
        calls: list[Call] = [
            GrpcCall(
                "ModelConfig",
                service_pb2.ModelConfigRequest(name=model.name).SerializeToString(),
                what=f"config {model.name}",
            ),
            GrpcCall(
                "ModelMetadata",
                service_pb2.ModelMetadataRequest(name=model.name).SerializeToString(),
                what=f"metadata {model.name}",
            ),
            HttpCall("GET", f"/v2/models/{quote(model.name)}/config", what=f"config {model.name}"),
            HttpCall("GET", f"/v2/models/{quote(model.name)}", what=f"metadata {model.name}"),
        ]
        for call in calls:
            generated.both.compare(call)


@budget(60)
@given(case=returns_cases(), binary=st.booleans())
def test_model_returns(generated: Generated, case: InferCase, binary: bool) -> None:
    generated.both.compare(infer_grpc(case))
    generated.both.compare(infer_http(case, binary_output=binary))
