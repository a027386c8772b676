"""sonic against real Triton 2.51 where the generated requests do not reach: loads, decoupled models, CUDA
shared memory, shared-memory keys.

One pair of servers (explicit model control) on a repository of :mod:`faulty_models`: each test sends
one call (or the same call over gRPC and HTTP) with one fault, as the single faults of
``test_differential`` do, so the message is compared, not only the status: the load of a model whose
configuration or code is broken in one way, an inference through the unary calls to a decoupled model,
CUDA shared-memory calls to a server that has none, a system shared-memory key that cannot be opened;
``test_reach_fault``: one fixed request per refusal the generated cases reach only by chance or not at
all (raw requests, typed contents, byte sizes, JSON fields of the wrong type, malformed protobuf).

Where an intended row lets sonic answer other words or another status than Triton's (Triton's 500 for a
client's fault, its Python backend's own words, a configuration it takes), the call also names sonic's
exact status and words (``Both.compare(call, sonic_says)``): what the row cannot hold to Triton's is
held to sonic's own, so a changed message fails here too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import tritonclient.utils.shared_memory as shm
from tests.integration.differential.calls import Call, GrpcCall, HttpCall
from tests.integration.differential.compare import Both, Session
from tests.integration.differential.faulty_models import (
    BLS,
    DECOUPLED,
    DECOUPLED_RAISES,
    FAULTY,
    MATRIX,
    MISBEHAVES,
    MISBEHAVIOURS,
    TEXT_ECHO,
    TYPED,
    VALID,
    write_faulty,
)
from tests.integration.differential.repository import SPARE, write_repository
from tests.integration.differential.servers import both_of, start_pair
from tritonclient.grpc import service_pb2

pytestmark = [pytest.mark.integration, pytest.mark.triton]

ARGS = (
    "--model-control-mode=explicit",
    f"--load-model={SPARE.name}",
    *(f"--load-model={m.name}" for m in VALID),
    "--exit-on-error=false",
    "--strict-readiness=false",
)
JSON = {"Content-Type": "application/json"}
HTTP_STATUS = {"INVALID_ARGUMENT": "400", "NOT_FOUND": "404", "INTERNAL": "500", "UNIMPLEMENTED": "501"}
Says = tuple[str, str] | None  # sonic's exact status and words, where a row lets them differ from Triton's


def _says(call: Call, code: str, words: str) -> tuple[str, str]:
    """Sonic's answer ``code`` (a gRPC status) and ``words``, as ``call`` gets it (over HTTP: the status)."""
    return (code if isinstance(call, GrpcCall) else HTTP_STATUS[code], words)


@pytest.fixture(scope="module")
def reach(tmp_path_factory: pytest.TempPathFactory, differential_session: Session) -> Iterator[Both]:
    root = write_repository(tmp_path_factory.mktemp("reach") / "models", (SPARE,))
    write_faulty(root)
    with ExitStack() as stack:
        pair = start_pair(
            stack,
            root,
            [SPARE.name, *(m.name for m in VALID)],
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


# Sonic's reason after the poll's words: configurations Triton loads (row config-refused-at-load), and
# refusals whose Triton words row poll-failure-status holds, not what sonic says after them.
REFUSED_AT_LOAD = {
    "negative_batch": "max_batch_size must be >= 0, got -1",
    "unknown_platform": (
        "unknown platform 'no_such_platform', expected one of ensemble, onnxruntime_onnx, pytorch_libtorch, "
        "tensorflow_graphdef, tensorflow_savedmodel"
    ),
    "preferred_too_big": "preferred_batch_size 8 must be in 1..max_batch_size (4)",
    "corrid_no_datatype": "CORRID control input 'CORRID' needs a data_type",
    "control_one_value": "control input 'START' needs two values (false, true), got [1]",
    "control_no_values": "control input 'START' needs int32_false_true, fp32_false_true or bool_false_true",
    "input_twice": "input 'X' is declared twice",
    "output_twice": "output 'OUT_X' is declared twice",
    "dynamic_unbatched": "dynamic_batching needs max_batch_size > 0 (the model has max_batch_size 0)",
    "negative_count": "instance_group count must be >= 0, got -1",
    "input_datatype_number": "input 'Y': datatype 99 has no KServe v2 equivalent",
}


@pytest.mark.parametrize("name", [m.name for m in FAULTY])
def test_load_fault(reach: Both, name: str) -> None:
    reason = REFUSED_AT_LOAD.get(name)
    words = f"failed to load '{name}', failed to poll from model repository: model '{name}': {reason}"
    for call in _load(name):
        reach.compare(call, None if reason is None else _says(call, "INVALID_ARGUMENT", words))


def test_load_bad_name(reach: Both) -> None:
    words = "invalid model name 'bad name': use letters, digits, '_', '-' and '.', one path component"
    reach.compare(_load("bad name")[0], ("INVALID_ARGUMENT", words))


def test_load_absent(reach: Both) -> None:
    for call in _load("absent"):
        reach.compare(call)


def _override(config: tuple[str, object], what: str) -> GrpcCall:
    message = service_pb2.RepositoryModelLoadRequest(model_name=SPARE.name)
    setattr(message.parameters["config"], *config)
    return GrpcCall(
        "RepositoryModelLoad", message.SerializeToString(deterministic=True), what=f"load, {what}", faults=1
    )


def test_load_config_override(reach: Both) -> None:
    """A load whose ``config`` parameter is no string, no configuration JSON, or names another model."""
    failed = "failed to load 'spare', failed to poll from model repository: invalid config override: "
    calls: list[tuple[Call, Says]] = [
        (_override(("int64_param", 3), "config not a string"), None),
        (
            _override(("string_param", "{not json"), "config not JSON"),
            (
                "INVALID_ARGUMENT",
                (
                    f"{failed}cannot parse model configuration JSON: Failed to load JSON: Expecting property name "
                    "enclosed in double quotes: line 1 column 2 (char 1)."
                ),
            ),
        ),
        (
            _override(
                ("string_param", json.dumps({"name": "other", "backend": "python"})), "config of another"
            ),
            (
                "INVALID_ARGUMENT",
                (
                    "failed to load 'spare', failed to poll from model repository: unexpected directory name "
                    "'spare' for model 'other', directory name must equal model name"
                ),
            ),
        ),
    ]
    for call, says in calls:
        reach.compare(call, says)
    body = json.dumps({"parameters": {"config": {"backend": "python"}}}).encode()
    words = (
        "invalid value type for load parameter 'config', expected string_param. Got dict for the load of "
        "'spare': the configuration is a JSON string"
    )
    call = HttpCall("POST", f"/v2/repository/models/{SPARE.name}/load", body, JSON, faults=1)
    reach.compare(call, ("400", words))


def test_infer_after_failed_load(reach: Both) -> None:
    """A model whose load failed, then asked for: it has no available versions; its statistics and those
    of a model never seen."""
    reach.compare(_load("initialize_fails")[0])
    for version in ("", "1"):
        request = service_pb2.ModelInferRequest(model_name="initialize_fails", model_version=version)
        request.inputs.add(name="X", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
        reach.compare(GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1))
    for name, version in (("initialize_fails", ""), ("absent", ""), (SPARE.name, "3")):
        message = service_pb2.ModelStatisticsRequest(name=name, version=version)
        reach.compare(GrpcCall("ModelStatistics", message.SerializeToString(), faults=1))


# Sonic's words where Triton's Python backend answers in its own (rows model-exception-text, missing-outputs).
MISBEHAVES_SAYS = {
    1: "model 'misbehaves': refused on purpose",
    2: "model 'misbehaves': execute failed: ValueError('fails on purpose')",
    3: "model 'misbehaves': execute must return one response per request (1), got 0 responses",
    4: "model 'misbehaves': execute returned str, not InferenceResponse",
    5: "model 'misbehaves' did not produce output(s) OUT_X",
}


@pytest.mark.parametrize("how", list(MISBEHAVIOURS), ids=list(MISBEHAVIOURS.values()))
def test_model_misbehaves(reach: Both, how: int) -> None:
    request = service_pb2.ModelInferRequest(model_name=MISBEHAVES.name)
    request.inputs.add(name="X", datatype="FP32", shape=[1]).contents.fp32_contents.append(float(how))
    words = MISBEHAVES_SAYS.get(how)
    call = GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1)
    reach.compare(call, None if words is None else ("INTERNAL", words))


def test_bytes_output_not_utf8(reach: Both) -> None:
    """A BYTES output that is no UTF-8 text, asked for as JSON."""
    body = {
        "inputs": [{"name": "X", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 5}}],
        "outputs": [{"name": "OUT_X", "parameters": {"binary_data": False}}],
    }
    head = json.dumps(body).encode()
    headers = {**JSON, "Inference-Header-Content-Length": str(len(head))}
    path = f"/v2/models/{TEXT_ECHO.name}/infer"
    words = (
        "model 'text_echo' output 'OUT_X': BYTES output is not UTF-8 text; request it with binary_data: true"
    )
    reach.compare(HttpCall("POST", path, head + b"\1\0\0\0\xff", headers, faults=1), ("400", words))


def test_bls_to_decoupled(reach: Both) -> None:
    request = service_pb2.ModelInferRequest(model_name=BLS.name)
    request.inputs.add(name="X", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
    reach.compare(GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1))


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
    unsupported = "shared memory is not supported by this server; use system shared memory"
    calls: list[tuple[Call, Says]] = [
        (HttpCall("GET", "/v2/cudasharedmemory/region/absent/status"), None),
        (
            GrpcCall(
                "CudaSharedMemoryStatus",
                service_pb2.CudaSharedMemoryStatusRequest(name="absent").SerializeToString(),
            ),
            None,
        ),
        (
            HttpCall("POST", "/v2/cudasharedmemory/region/r/register", json.dumps(register).encode(), JSON),
            ("501", f"CUDA {unsupported}"),
        ),
        (
            GrpcCall(
                "CudaSharedMemoryRegister",
                service_pb2.CudaSharedMemoryRegisterRequest(
                    name="r", raw_handle=b"AAAA", device_id=0, byte_size=8
                ).SerializeToString(),
            ),
            (
                "UNIMPLEMENTED",
                "CUDA shared memory region 'r': not supported by this server; use system shared memory",
            ),
        ),
    ]
    for call, says in calls:
        reach.compare(call, says)


# Triton answers INTERNAL in its own words (row client-fault-not-internal): sonic's status and words.
KEY_SAYS = {
    "/a/b": ("INVALID_ARGUMENT", "shared memory key '/a/b' is not a valid POSIX shared memory name"),
    "/" + "k" * 300: (
        "INVALID_ARGUMENT",
        f"unable to open shared memory region 'r' (key '/{'k' * 300}'): File name too long",
    ),
    "/absent_key": (
        "NOT_FOUND",
        "unable to open shared memory region 'r': no shared memory object with key '/absent_key'",
    ),
}


@pytest.mark.parametrize("key", list(KEY_SAYS), ids=["/a/b", "key1", "/absent_key"])
def test_shared_memory_key(reach: Both, key: str) -> None:
    message = service_pb2.SystemSharedMemoryRegisterRequest(name="r", key=key, offset=0, byte_size=8)
    reach.compare(
        GrpcCall("SystemSharedMemoryRegister", message.SerializeToString(), faults=1), KEY_SAYS[key]
    )


@pytest.mark.parametrize("version", ["abc", "-1"])
def test_version_string(reach: Both, version: str) -> None:
    request = service_pb2.ModelInferRequest(model_name=SPARE.name, model_version=version)
    request.inputs.add(name="X", datatype="UINT8", shape=[2])
    request.raw_input_contents.append(b"\1\2")
    reach.compare(GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1))


def _control(method: str, parameters: dict[str, tuple[str, object]], what: str) -> GrpcCall:
    request = getattr(service_pb2, method + "Request")(model_name=SPARE.name)
    for key, (kind, value) in parameters.items():
        setattr(request.parameters[key], kind, value)
    return GrpcCall(method, request.SerializeToString(deterministic=True), what=what, faults=1)


def test_control_parameters(reach: Both) -> None:
    # An unload Triton takes unloads ``spare``: the last call loads it again.
    load = f"/v2/repository/models/{SPARE.name}/load"
    calls: list[tuple[Call, Says]] = [
        (_control("RepositoryModelLoad", {"bogus": ("string_param", "x")}, "load, unknown parameter"), None),
        (
            _control(
                "RepositoryModelUnload", {"unload_dependents": ("string_param", "yes")}, "unload, dependents"
            ),
            None,
        ),
        (
            HttpCall("POST", load, b'{"parameters": []}', JSON),
            ("400", "load of 'spare': 'parameters' must be an object"),
        ),
        (
            HttpCall("POST", load, b'{"parameters": {"bogus": 1}}', JSON),
            ("400", "load of 'spare': unrecognized load parameter 'bogus'."),
        ),
        (
            _control("RepositoryModelUnload", {"bogus": ("string_param", "x")}, "unload, unknown parameter"),
            ("INVALID_ARGUMENT", "unload of 'spare': unknown parameter 'bogus' (known: 'unload_dependents')"),
        ),
        (_control("RepositoryModelLoad", {}, "load again"), None),
    ]
    for call, says in calls:
        reach.compare(call, says)


@pytest.fixture(scope="module")
def region(reach: Both) -> Iterator[str]:
    """A system shared-memory region ``r`` of 16 bytes, registered with both servers for the module (not
    compared: a replay of one test alone must not meet the calls of another's fixture)."""
    key = f"/sonic_differential_{os.getpid():08d}_reach"
    handle = shm.create_shared_memory_region("reach", key, SHM_BYTES)
    register = {"key": key, "offset": 0, "byte_size": REGION_BYTES}
    servers = [caller for caller in (reach.triton, reach.sonic) if caller is not None]
    try:
        for caller in servers:
            call = HttpCall(
                "POST", "/v2/systemsharedmemory/region/r/register", json.dumps(register).encode(), JSON
            )
            assert caller(call).code == "200"
        yield key
    finally:
        for caller in servers:
            caller(HttpCall("POST", "/v2/systemsharedmemory/region/r/unregister"))
        shm.destroy_shared_memory_region(handle)


SHM_BYTES = 8192
REGION_BYTES = 16


def _shm_input(offset: int, size: int) -> list[Call]:
    reference = {"shared_memory_region": "r", "shared_memory_byte_size": size, "shared_memory_offset": offset}
    body = {"inputs": [{"name": "X", "datatype": "UINT8", "shape": [2], "parameters": reference}]}
    request = service_pb2.ModelInferRequest(model_name=SPARE.name)
    parameters = request.inputs.add(name="X", datatype="UINT8", shape=[2]).parameters
    parameters["shared_memory_region"].string_param = "r"
    parameters["shared_memory_byte_size"].int64_param = size
    parameters["shared_memory_offset"].int64_param = offset
    return [
        HttpCall("POST", f"/v2/models/{SPARE.name}/infer", json.dumps(body).encode(), JSON, faults=1),
        GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1),
    ]


def _output_parameters(parameters: dict[str, object]) -> list[Call]:
    body = {
        "inputs": [{"name": "X", "datatype": "UINT8", "shape": [2], "data": [1, 2]}],
        "outputs": [{"name": "OUT_X", "parameters": parameters}],
    }
    request = service_pb2.ModelInferRequest(model_name=SPARE.name)
    request.inputs.add(name="X", datatype="UINT8", shape=[2])
    request.raw_input_contents.append(b"\1\2")
    output = request.outputs.add(name="OUT_X")
    for key, value in parameters.items():
        field = {str: "string_param", int: "int64_param", bool: "bool_param"}[type(value)]
        setattr(output.parameters[key], field, value)
    return [
        HttpCall("POST", f"/v2/models/{SPARE.name}/infer", json.dumps(body).encode(), JSON, faults=1),
        GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1),
    ]


OUTPUT_FAULTS: dict[str, dict[str, object]] = {
    "shared memory too small": {"shared_memory_region": "r", "shared_memory_byte_size": 1},
    "shared memory past the region": {"shared_memory_region": "r", "shared_memory_byte_size": 32},
    "classification not a number": {"classification": "x"},
    "classification negative": {"classification": -1},
    "classification and shared memory": {
        "classification": 1,
        "shared_memory_region": "r",
        "shared_memory_byte_size": REGION_BYTES,
    },
}


@pytest.mark.parametrize(
    "calls",
    [
        pytest.param(_shm_input(20, 2), id="input offset past the region"),
        pytest.param(_shm_input(15, 2), id="input past the region"),
        *(pytest.param(_output_parameters(p), id=name) for name, p in OUTPUT_FAULTS.items()),
    ],
)
def test_shared_memory_reference(reach: Both, region: str, calls: list[Call]) -> None:
    for call in calls:
        reach.compare(call, REFERENCE_SAYS.get(call.what or repr(call)))


# Sonic's words where Triton answers INTERNAL/500 in its own (row client-fault-not-internal).
TOO_SMALL = (
    "model 'spare' output 'OUT_X': shared memory size specified with the request for output 'OUT_X' (1 bytes) "
    "should be at least 2 bytes to hold the results"
)
CLASSIFICATION = (
    "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer "
    "(model 'spare' output 'OUT_X': got {})"
)
REFERENCE_SAYS: dict[str, tuple[str, str]] = {
    **{
        repr(call): _says(call, "INVALID_ARGUMENT", TOO_SMALL)
        for call in _output_parameters(OUTPUT_FAULTS["shared memory too small"])
    },
    repr(_output_parameters(OUTPUT_FAULTS["classification not a number"])[0]): (
        "400",
        CLASSIFICATION.format("'x'"),
    ),
    repr(_output_parameters(OUTPUT_FAULTS["classification negative"])[0]): ("400", CLASSIFICATION.format(-1)),
}


def test_shared_memory_register(reach: Both, region: str) -> None:
    bodies: tuple[tuple[str, dict[str, object]], ...] = (
        ("r", {"key": region, "offset": 0, "byte_size": REGION_BYTES}),  # registered already
        ("big", {"key": region, "offset": 0, "byte_size": SHM_BYTES * 2}),  # past the object
        ("neg", {"key": region, "offset": -1, "byte_size": 8}),
        ("int_key", {"key": 3, "offset": 0, "byte_size": 8}),
    )
    # Triton answers 500 in its own words for the last three (row client-fault-not-internal).
    says: tuple[Says, ...] = (
        None,
        (
            "400",
            (
                f"failed to register shared memory region 'big': invalid args: offset 0 + byte size "
                f"{SHM_BYTES * 2} exceeds the {SHM_BYTES} bytes of shared memory object '{region}'"
            ),
        ),
        ("400", "shared memory region 'neg': offset -1 and byte size 8 must be >= 0"),
        (
            "400",
            (
                "register of region 'int_key': expected {'key': str, 'offset': int, 'byte_size': int}, got "
                "{'key': 3, 'offset': 0, 'byte_size': 8}"
            ),
        ),
    )
    for (name, register), said in zip(bodies, says, strict=True):
        path = f"/v2/systemsharedmemory/region/{name}/register"
        reach.compare(HttpCall("POST", path, json.dumps(register).encode(), JSON, faults=1), said)


def test_http_headers(reach: Both) -> None:
    body = json.dumps({"inputs": [{"name": "X", "datatype": "UINT8", "shape": [2], "data": [1, 2]}]}).encode()
    path = f"/v2/models/{SPARE.name}/infer"
    reach.compare(HttpCall("POST", path, body, {**JSON, "Content-Encoding": "br"}, faults=1))
    reach.compare(
        HttpCall("POST", path, body, {**JSON, "Inference-Header-Content-Length": "x"}, faults=1),
        ("400", "Inference-Header-Content-Length must be an integer, got 'x'"),
    )


def _stream(tensor: str = "X", model: str = DECOUPLED.name) -> GrpcCall:
    """One ModelStreamInfer request to a decoupled model (``decoupled``'s execute returns its responses)."""
    request = service_pb2.ModelInferRequest(model_name=model, id="s1")
    request.inputs.add(name=tensor, datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
    return GrpcCall("ModelStreamInfer", request.SerializeToString(deterministic=True), faults=1)


@pytest.mark.parametrize(
    "call",
    [
        # The model's execute returns its responses instead of None: the model's fault, in the stream.
        pytest.param(_stream(), id="execute returns responses"),
        pytest.param(_stream(tensor="BOGUS"), id="unexpected input"),
        pytest.param(_stream(model=DECOUPLED_RAISES.name), id="execute raises"),
    ],
)
def test_decoupled_stream(reach: Both, call: GrpcCall) -> None:
    raises = "decoupled_raises" in call.payload.decode(errors="replace")
    words = "Failed to process the request(s) for model 'decoupled_raises_0', message: ValueError: on purpose"
    reach.compare(call, ("STREAM_ERROR", words) if raises else None)


TYPED_INPUTS = (("B", "BOOL", True), ("I", "INT32", 1), ("F", "FP32", 1.0))


def _typed_json(**changes: dict[str, object]) -> dict[str, list[dict[str, object]]]:
    """A valid JSON request to ``typed``, each named input's entry updated by ``changes``."""
    inputs = []
    for name, datatype, value in TYPED_INPUTS:
        entry: dict[str, object] = {"name": name, "datatype": datatype, "shape": [1], "data": [value]}
        entry.update(changes.get(name, {}))
        inputs.append({k: v for k, v in entry.items() if v is not None})
    return {"inputs": inputs}


def _typed_http(body: dict[str, Any], model: str = TYPED.name) -> HttpCall:
    return HttpCall("POST", f"/v2/models/{model}/infer", json.dumps(body).encode(), JSON, faults=1)


def _typed_grpc(raw: list[bytes], bad: tuple[str, str, object] | None = None) -> GrpcCall:
    """A gRPC request to ``typed``; ``bad``: F in shared memory region ``r`` (4 bytes) with one parameter
    (key, field, value) of the wrong type."""
    request = service_pb2.ModelInferRequest(model_name=TYPED.name)
    for name, datatype, _ in TYPED_INPUTS:
        tensor = request.inputs.add(name=name, datatype=datatype, shape=[1])
        if name == "F" and bad is not None:
            tensor.parameters["shared_memory_region"].string_param = "r"
            tensor.parameters["shared_memory_byte_size"].int64_param = 4
            key, field, value = bad
            tensor.parameters[key].Clear()
            setattr(tensor.parameters[key], field, value)
    request.raw_input_contents.extend(raw)
    return GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1)


RAW = [b"\1", b"\1\0\0\0", b"\0\0\x80\x3f"]
SHM_PARAMETERS = {"shared_memory_region": "r", "shared_memory_byte_size": "x"}
REQUEST_FAULTS: dict[str, Call] = {
    "BOOL data not a boolean": _typed_http(_typed_json(B={"data": [1]})),
    "INT32 data not an integer": _typed_http(_typed_json(I={"data": [1.5]})),
    "FP32 data a string": _typed_http(_typed_json(F={"data": ["x"]})),
    "FP32 data an object": _typed_http(_typed_json(F={"data": [{"a": 1}]})),
    "INT32 data out of range": _typed_http(_typed_json(I={"data": [2**40]})),
    "unknown datatype": _typed_http(_typed_json(I={"datatype": "INT33"})),
    "repeated input": _typed_http(
        {"inputs": [*_typed_json()["inputs"], {"name": "I", "datatype": "INT32", "shape": [1], "data": [2]}]}
    ),
    "request parameter a list": _typed_http({**_typed_json(), "parameters": {"custom": [1]}}),
    "output parameters a list": _typed_http(
        {**_typed_json(), "outputs": [{"name": "OUT_I", "parameters": []}]}
    ),
    "input byte size not a number": _typed_http(_typed_json(F={"data": None, "parameters": SHM_PARAMETERS})),
    "BYTES element a number": _typed_http(
        {"inputs": [{"name": "X", "datatype": "BYTES", "shape": [1], "data": [3]}]}, TEXT_ECHO.name
    ),
    "BYTES elements more than the shape": _typed_http(
        {"inputs": [{"name": "X", "datatype": "BYTES", "shape": [1], "data": ["a", "b"]}]}, TEXT_ECHO.name
    ),
    "BYTES data a string": _typed_http(
        {"inputs": [{"name": "X", "datatype": "BYTES", "shape": [1], "data": "a"}]}, TEXT_ECHO.name
    ),
    "raw contents fewer than inputs": _typed_grpc(RAW[:1]),
    "raw contents more than inputs": _typed_grpc([*RAW, b"\0"]),
    "raw contents of the wrong size": _typed_grpc([RAW[0], b"\1\0\0", RAW[2]]),
    "gRPC byte size a string": _typed_grpc(RAW[:2], ("shared_memory_byte_size", "string_param", "x")),
    "gRPC offset a string": _typed_grpc(RAW[:2], ("shared_memory_offset", "string_param", "x")),
    "gRPC region a number": _typed_grpc(RAW[:2], ("shared_memory_region", "int64_param", 3)),
}


@pytest.mark.parametrize("call", list(REQUEST_FAULTS.values()), ids=list(REQUEST_FAULTS))
def test_request_fault(reach: Both, region: str, call: Call) -> None:
    """One fault in a request to ``typed`` (or ``text_echo``): the refusals the generated cases may miss;
    where Triton answers 500 in its own words (row client-fault-not-internal), sonic's are asserted."""
    name = next(key for key, value in REQUEST_FAULTS.items() if value is call)
    reach.compare(call, REQUEST_SAYS.get(name))


PARSE = "Unable to parse 'data': attempt to access JSON"
REQUEST_SAYS: dict[str, tuple[str, str]] = {
    "BOOL data not a boolean": (
        "400",
        f"model 'typed' input 'B': {PARSE} non-boolean as boolean (element 0 of the BOOL input is 1)",
    ),
    "INT32 data not an integer": (
        "400",
        (
            f"model 'typed' input 'I': {PARSE} non-signed-integer as signed-integer (element 0 of the INT32 input "
            "is 1.5)"
        ),
    ),
    "FP32 data a string": (
        "400",
        f"model 'typed' input 'F': {PARSE} non-number as double (element 0 of the FP32 input is \"x\")",
    ),
    "FP32 data an object": (
        "400",
        f"model 'typed' input 'F': {PARSE} non-number as double (element 0 of the FP32 input is {{\"a\": 1}})",
    ),
    "INT32 data out of range": (
        "400",
        "model 'typed' input 'I': value 1099511627776 is out of range for INT32 (-2147483648..2147483647)",
    ),
    "output parameters a list": ("400", "model 'typed' output 'OUT_I': 'parameters' must be an object"),
    "input byte size not a number": (
        "400",
        "model 'typed' input 'F': parameter 'shared_memory_byte_size' must be an integer, got 'x'",
    ),
    "BYTES element a number": (
        "400",
        (
            "model 'text_echo' input 'X': Unable to parse JSON bytes array: attempt to access JSON non-string as "
            "string (BYTES element 0 is int, not a string)"
        ),
    ),
    "BYTES data a string": (
        "400",
        (
            "model 'text_echo' input 'X': Unable to parse 'data': attempt to access JSON non-array as array (the "
            "BYTES input's 'data' is \"a\")"
        ),
    ),
    "raw contents more than inputs": (
        "INVALID_ARGUMENT",
        (
            "model 'typed': raw_input_contents has 4 entries for 3 inputs not in shared memory; when raw contents "
            "are used every such input must have one"
        ),
    ),
}


def test_bytes_length_past_the_end(reach: Both) -> None:
    request = service_pb2.ModelInferRequest(model_name=TEXT_ECHO.name)
    request.inputs.add(name="X", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(b"\xff\0\0\0ab")
    words = (
        "model 'text_echo' version 1 input 'X': malformed BYTES data: element 0 declares 255 bytes but only "
        "2 remain"
    )
    call = GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1)
    reach.compare(call, ("INVALID_ARGUMENT", words))


def test_shared_memory_negative_offset(reach: Both, region: str) -> None:
    http, grpc = _shm_input(-1, 2)
    words = "model 'spare' input 'X': Invalid offset for shared memory region: 'r' (offset -1; the region has 16 bytes)"
    reach.compare(http, ("400", words))
    reach.compare(grpc)


def _raw(model: str, body: bytes) -> HttpCall:
    """Triton's raw binary request: the body is the model's one input (its shape from the config)."""
    headers = {"Inference-Header-Content-Length": "0"}
    return HttpCall("POST", f"/v2/models/{model}/infer", body, headers, faults=1)


def _binary(model: str, inputs: list[dict[str, object]], data: bytes) -> HttpCall:
    head = json.dumps({"inputs": inputs}).encode()
    headers = {**JSON, "Inference-Header-Content-Length": str(len(head))}
    return HttpCall("POST", f"/v2/models/{model}/infer", head + data, headers, faults=1)


def _matrix(how: float) -> GrpcCall:
    """A request to ``matrix`` whose X asks its execute for one misbehaviour (``MATRIX_SOURCE``)."""
    request = service_pb2.ModelInferRequest(model_name=MATRIX.name)
    request.inputs.add(name="X", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(how)
    return GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1)


def _spare_typed(values: list[int], *, twice: bool = False) -> GrpcCall:
    request = service_pb2.ModelInferRequest(model_name=SPARE.name)
    for _ in range(2 if twice else 1):
        request.inputs.add(name="X", datatype="UINT8", shape=[2]).contents.uint_contents.extend(values)
    return GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1)


def _typed_body(body: bytes, headers: dict[str, str] | None = None) -> HttpCall:
    return HttpCall("POST", f"/v2/models/{TYPED.name}/infer", body, headers or JSON, faults=1)


def _text_raw(raw: bytes) -> GrpcCall:
    request = service_pb2.ModelInferRequest(model_name=TEXT_ECHO.name)
    request.inputs.add(name="X", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(raw)
    return GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1)


def _matrix_json(shape: list[int], data: list[object]) -> HttpCall:
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": shape, "data": data}]}
    return HttpCall("POST", f"/v2/models/{MATRIX.name}/infer", json.dumps(body).encode(), JSON, faults=1)


def _matrix_grpc(shape: list[int]) -> GrpcCall:
    request = service_pb2.ModelInferRequest(model_name=MATRIX.name)
    request.inputs.add(name="X", datatype="FP32", shape=shape).contents.fp32_contents.append(1.0)
    return GrpcCall("ModelInfer", request.SerializeToString(deterministic=True), faults=1)


# The single faults of test_differential's generated cases, one fixed request each, so that sonic's own
# words can be asserted where a row lets them differ from Triton's (the generated requests vary).
SINGLE_FAULTS: dict[str, Call] = {
    "BYTES element without its length": _text_raw(b"\1\0"),
    "BYTES bytes left over": _text_raw(b"\1\0\0\0ab"),
    "negative dimension, typed": _matrix_grpc([-2, 1]),
    "negative dimension, JSON": _matrix_json([-2, 1], []),
    "JSON data longer than the shape": _matrix_json([1, 1], [1.0, 2.0]),
    "JSON data ragged": _matrix_json([2, 2], [[1.0], [1.0, 2.0]]),
    "request JSON unparsable": _typed_body(b"{"),
    "header length past the body": _typed_body(b"{}", {**JSON, "Inference-Header-Content-Length": "99"}),
    "inference JSON not an object": _typed_body(b"[1]"),
    "no inputs": _typed_body(b"{}"),
    "input without name": _typed_http({"inputs": [{"datatype": "INT32", "shape": [1], "data": [1]}]}),
    "shape not a list": _typed_http(_typed_json(I={"shape": "x"})),
    "no datatype": _typed_http(_typed_json(I={"datatype": None})),
    "shared memory region a number": _typed_http(
        _typed_json(F={"data": None, "parameters": {"shared_memory_region": 3, "shared_memory_byte_size": 4}})
    ),
    "outputs not a list": _typed_http({**_typed_json(), "outputs": {"name": "OUT_I"}}),
    "output without name": _typed_http({**_typed_json(), "outputs": [{}]}),
    "request parameter of the wrong type": _typed_http({**_typed_json(), "parameters": {"priority": "x"}}),
    "protobuf varint cut short": GrpcCall("ModelInfer", b"\x08", faults=1),
    "protobuf wire type 7": GrpcCall("ModelInfer", b"\x0f", faults=1),
    "protobuf field past the end": GrpcCall("ModelInfer", b"\x0a\x05ab", faults=1),
    "method not allowed": HttpCall("DELETE", "/v2/health/live"),
    "region name empty": GrpcCall(
        "SystemSharedMemoryRegister",
        service_pb2.SystemSharedMemoryRegisterRequest(
            name="", key="/k", offset=0, byte_size=8
        ).SerializeToString(),
        faults=1,
    ),
}


SINGLE_SAYS: dict[str, tuple[str, str]] = {
    "BYTES element without its length": (
        "INVALID_ARGUMENT",
        (
            "model 'text_echo' version 1 input 'X': malformed BYTES data: element 0 of 1 has no 4-byte length "
            "prefix (buffer is 2 bytes)"
        ),
    ),
    "BYTES bytes left over": (
        "INVALID_ARGUMENT",
        "model 'text_echo' version 1 input 'X': malformed BYTES data: 1 bytes left over after 1 elements",
    ),
    "negative dimension, typed": (
        "INVALID_ARGUMENT",
        "model 'matrix' version 1 input 'X': shape [-2, 1] has a negative dimension",
    ),
    "negative dimension, JSON": ("400", "model 'matrix' input 'X': shape [-2, 1] has a negative dimension"),
    "JSON data longer than the shape": (
        "400",
        "model 'matrix' input 'X': expected 1 FP32 elements for shape [1, 1], got 2",
    ),
    "JSON data ragged": (
        "400",
        (
            "model 'matrix' input 'X': 'data' is not a regular nested list: setting an array element with a "
            "sequence. The requested array has an inhomogeneous shape after 1 dimensions. The detected shape "
            "was (2,) + inhomogeneous part."
        ),
    ),
    "request JSON unparsable": (
        "400",
        (
            "inference request JSON cannot be parsed: Expecting property name enclosed in double quotes: line 1 "
            "column 2 (char 1)"
        ),
    ),
    "header length past the body": (
        "400",
        "Inference-Header-Content-Length is 99 but the request body has 2 bytes",
    ),
    "inference JSON not an object": ("400", "inference request JSON must be an object"),
    "no inputs": ("400", "model 'typed': the request has no 'inputs' list"),
    "input without name": ("400", "model 'typed': every input needs a 'name'"),
    "shape not a list": ("400", "model 'typed' input 'I': 'shape' must be a list of integers, got 'x'"),
    "no datatype": ("400", "model 'typed' input 'I': 'datatype' is missing"),
    "shared memory region a number": (
        "400",
        "model 'typed' input 'F': parameter 'shared_memory_region' must be a string",
    ),
    "outputs not a list": ("400", "model 'typed': 'outputs' must be a list"),
    "output without name": ("400", "model 'typed': every requested output needs a 'name'"),
    "request parameter of the wrong type": (
        "400",
        "model 'typed': request parameter 'priority' must be an integer, got 'x'",
    ),
    "protobuf varint cut short": ("INVALID_ARGUMENT", "malformed protobuf message: truncated varint"),
    "protobuf wire type 7": ("INVALID_ARGUMENT", "malformed protobuf message: wire type 7 at byte 0"),
    "protobuf field past the end": (
        "INVALID_ARGUMENT",
        "malformed protobuf message: field runs past the end of the message",
    ),
    "method not allowed": ("405", "method not allowed: DELETE /v2/health/live (use GET)"),
    "region name empty": ("INVALID_ARGUMENT", "shared memory region name must not be empty"),
}
TYPED_JSON: list[dict[str, object]] = [
    {"name": "B", "datatype": "BOOL", "shape": [1], "data": [True]},
    {"name": "I", "datatype": "INT32", "shape": [1], "data": [1]},
]
SHORT_F: dict[str, object] = {
    "name": "F",
    "datatype": "FP32",
    "shape": [1],
    "parameters": {"binary_data_size": 3},
}
NEGATIVE_SIZE = (
    "model 'spare' input 'X': Invalid offset + byte size for shared memory region: 'r' (byte size -1 at "
    "offset 0 is negative)"
)
REACH_FAULTS: dict[str, list[tuple[Call, Says]]] = {
    "no such endpoint": [
        (
            HttpCall("GET", "/v3/models"),
            ("404", "no such endpoint: GET /v3/models (every endpoint is under /v2)"),
        )
    ],
    "no such v2 endpoint": [
        (HttpCall("GET", "/v2/nothing/here"), ("404", "no such endpoint: GET /v2/nothing/here"))
    ],
    "register JSON not an object": [
        (HttpCall("POST", "/v2/systemsharedmemory/region/q/register", b"[1]", JSON, faults=1), None)
    ],
    "index JSON not an object": [
        (
            HttpCall("POST", "/v2/repository/index", b"[1]", JSON, faults=1),
            ("400", "request JSON must be an object"),
        )
    ],
    "raw, two variable dims": [(_raw(MATRIX.name, b"\0" * 8), None)],
    "raw BYTES not [1]": [(_raw(TEXT_ECHO.name, b"abc"), None)],
    "typed UINT8 out of range": [
        (
            _spare_typed([1, 300]),
            ("INVALID_ARGUMENT", "model 'spare' input 'X': value 300 is out of range for UINT8 (0..255)"),
        )
    ],
    "typed input repeated": [(_spare_typed([1, 2], twice=True), None)],
    "JSON INT32 past int64": [
        (
            _typed_http(_typed_json(I={"data": [2**70]})),
            (
                "400",
                f"model 'typed' input 'I': value {2**70} is out of range for INT32 (-2147483648..2147483647)",
            ),
        )
    ],
    "JSON data a number": [
        (
            _typed_http(_typed_json(I={"data": 5})),
            (
                "400",
                (
                    "model 'typed' input 'I': Unable to parse 'data': attempt to access JSON non-array as array "
                    "(the INT32 input's 'data' is 5)"
                ),
            ),
        )
    ],
    **{what: [(call, SINGLE_SAYS[what])] for what, call in SINGLE_FAULTS.items()},
    "binary data of the wrong size": [(_binary(TYPED.name, [*TYPED_JSON, SHORT_F], b"abc"), None)],
    "shared memory input of the wrong size": [(call, None) for call in _shm_input(0, 3)],
    "shared memory byte size negative": list(
        zip(_shm_input(0, -1), [("400", NEGATIVE_SIZE), None], strict=True)
    ),
    "BYTES output given numbers": [
        (
            _matrix(7.0),
            (
                "INTERNAL",
                "model 'matrix': output 'OUT_S' is BYTES in the config, but the model gave numpy float32",
            ),
        )
    ],
    "BLS input complex64": [
        (_matrix(8.0), ("INTERNAL", "model 'matrix': Tensor 'X': numpy dtype complex64 has no Triton type"))
    ],
}


@pytest.mark.parametrize("case", list(REACH_FAULTS), ids=list(REACH_FAULTS))
def test_reach_fault(reach: Both, region: str, case: str) -> None:
    """One fault each, reaching a refusal no other case does; where a row lets sonic's answer differ from
    Triton's, sonic's own exact status and words are asserted too."""
    for call, says in REACH_FAULTS[case]:
        reach.compare(call, says)
