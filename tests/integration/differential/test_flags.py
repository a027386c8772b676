"""sonic against real Triton 2.51 under server flags: model-control modes, readiness, header forwarding.

Each flag set is one pair of servers on one small repository, started once: ``none`` and ``poll``
model control (the main pair runs ``explicit``), ``--exit-on-error=false`` with a model that fails to
load at start, ``--strict-readiness`` true and false (a model that fails to load, loaded after the
start), and ``--grpc/http-header-forward-pattern`` (a model that answers the parameters it sees). The
same calls go to both; the differences are rows of ``intended.INTENDED``.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.integration.differential.calls import Call, GrpcCall, HttpCall
from tests.integration.differential.compare import Both, Session, budget
from tests.integration.differential.faulty_models import INITIALIZE_FAILS
from tests.integration.differential.repository import PYTHON_MODELS, SPARE, config_text, write_repository
from tests.integration.differential.servers import both_of, start_pair
from tests.integration.differential.strategies import control_cases
from tritonclient.grpc import service_pb2

pytestmark = [pytest.mark.integration, pytest.mark.triton]

BROKEN = "broken"
PARAMETERS = "echo_parameters"
PARAMETERS_CONFIG = """
name: "echo_parameters"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [
  { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "SEQUENCE" data_type: TYPE_STRING dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
FORWARD = "x-fwd-.*"


def _write_broken(root: Path) -> None:
    (root / BROKEN / "1").mkdir(parents=True, exist_ok=True)
    (root / BROKEN / "config.pbtxt").write_text(
        config_text(SPARE).replace('"spare"', f'"{BROKEN}"'), encoding="utf-8"
    )
    (root / BROKEN / "1" / "model.py").write_text(INITIALIZE_FAILS, encoding="utf-8")


def _write_parameters(root: Path) -> None:
    (root / PARAMETERS / "1").mkdir(parents=True, exist_ok=True)
    (root / PARAMETERS / "config.pbtxt").write_text(
        textwrap.dedent(PARAMETERS_CONFIG).lstrip(), encoding="utf-8"
    )
    source = (PYTHON_MODELS / "echo_parameters.py").read_text(encoding="utf-8")
    (root / PARAMETERS / "1" / "model.py").write_text(source, encoding="utf-8")


@dataclass(frozen=True)
class FlagSet:
    name: str
    args: tuple[str, ...]
    broken_at_start: bool  # the broken model is in the repository when the servers start


FLAG_SETS = (
    FlagSet(
        "none-mode",
        (
            "--model-control-mode=none",
            "--exit-on-error=false",
            "--strict-readiness=false",
            f"--grpc-header-forward-pattern={FORWARD}",
            f"--http-header-forward-pattern={FORWARD}",
        ),
        broken_at_start=True,
    ),
    # Triton in poll mode waits out its exit timeout (30 s by default) when it is stopped.
    FlagSet(
        "poll-mode",
        ("--model-control-mode=poll", "--repository-poll-secs=3600", "--exit-timeout-secs=3"),
        broken_at_start=False,
    ),
    FlagSet(
        "strict-readiness",
        (
            "--model-control-mode=explicit",
            "--load-model=*",
            "--strict-readiness=true",
            "--exit-on-error=false",
        ),
        broken_at_start=False,
    ),
)


@dataclass
class Flagged:
    both: Both
    flags: FlagSet
    repository: Path


@pytest.fixture(scope="module", params=FLAG_SETS, ids=lambda f: f.name)
def flagged(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, differential_session: Session
) -> Iterator[Flagged]:
    flags: FlagSet = request.param
    root = write_repository(tmp_path_factory.mktemp(f"flags-{flags.name}") / "models", (SPARE,))
    _write_parameters(root)
    if flags.broken_at_start:
        _write_broken(root)
    with ExitStack() as stack:
        pair = start_pair(
            stack,
            root,
            [SPARE.name, PARAMETERS],
            triton_args=flags.args,
            sonic_args=flags.args,
            replaying=differential_session.replaying,
        )
        both = both_of(pair, differential_session)
        stack.callback(both.close)
        yield Flagged(both, flags, root)


def _readiness(model: str) -> list[Call]:
    return [
        GrpcCall("ServerReady", b"", what="server readiness"),
        HttpCall("GET", "/v2/health/ready", what="server readiness"),
        GrpcCall(
            "ModelReady", service_pb2.ModelReadyRequest(name=model).SerializeToString(), what=f"{model} ready"
        ),
        HttpCall("GET", f"/v2/models/{model}/ready", what=f"{model} ready"),
        GrpcCall("RepositoryIndex", service_pb2.RepositoryIndexRequest().SerializeToString(), what="index"),
        HttpCall("POST", "/v2/repository/index", b"{}", {"Content-Type": "application/json"}, what="index"),
    ]


def test_readiness_and_index(flagged: Flagged) -> None:
    if not flagged.flags.broken_at_start and flagged.flags.args[0] == "--model-control-mode=explicit":
        # The broken model arrives after the start and is loaded: both refuse it; readiness follows.
        _write_broken(flagged.repository)
        message = service_pb2.RepositoryModelLoadRequest(model_name=BROKEN)
        flagged.both.compare(GrpcCall("RepositoryModelLoad", message.SerializeToString(), what="load broken"))
    for call in _readiness(BROKEN) + _readiness(SPARE.name):
        flagged.both.compare(call)


@budget(3)  # each load of a mode that allows it starts a Python stub on Triton: seconds apiece
@given(calls=control_cases())
def test_model_control_modes(flagged: Flagged, calls: list[Call]) -> None:
    for call in calls:
        flagged.both.compare(call)


@budget(8)
@given(
    headers=st.dictionaries(
        st.sampled_from(["x-fwd-a", "x-fwd-b", "X-Fwd-Case", "x-other", "authorization"]),
        st.sampled_from(["1", "value", ""]),
        max_size=3,
    ),
    grpc=st.booleans(),
)
def test_header_forwarding(flagged: Flagged, headers: dict[str, str], grpc: bool) -> None:
    what = f"headers {headers}"
    if grpc:
        request = service_pb2.ModelInferRequest(model_name=PARAMETERS)
        request.inputs.add(name="X", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
        metadata = tuple((k.lower(), v) for k, v in headers.items())
        payload = request.SerializeToString(deterministic=True)
        flagged.both.compare(GrpcCall("ModelInfer", payload, what=what, metadata=metadata))
        return
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    call = HttpCall(
        "POST",
        f"/v2/models/{PARAMETERS}/infer",
        json.dumps(body).encode(),
        {"Content-Type": "application/json", **headers},
        what=what,
    )
    flagged.both.compare(call)
