"""Hypothesis strategies for the differential corpus: mostly valid requests, each bent in one or two ways.

Every strategy draws from the models of :mod:`repository` so that most cases reach deep validation
(a right model with a wrong shape) rather than failing at the first check.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from urllib.parse import quote

from google.protobuf.message import Message
from hypothesis import strategies as st
from tests.integration.differential.calls import Call, GrpcCall, HttpCall
from tests.integration.differential.repository import (
    BATCHED,
    MIXED,
    MODELS,
    SEQUENCE,
    SPARE,
    ModelSpec,
    TensorSpec,
)
from tests.integration.differential.requests import (
    DATATYPES,
    InferCase,
    ParamValue,
    TensorCase,
    infer_grpc,
    infer_http,
    raw_bytes,
    raw_http,
)
from tritonclient.grpc import service_pb2

INFER_MODELS = (MIXED, BATCHED, SPARE)
OTHER_NAMES = ("no_such_model", "")
# Versions: the model's own, none, and versions that do not exist. Strings that are not numbers are
# answered by the version-parsing work on branch secpaths and left out here.
VERSIONS = ("", "1", "2")
PARAMETERS: tuple[tuple[str, st.SearchStrategy[ParamValue]], ...] = (
    ("priority", st.sampled_from([0, 1, 2])),
    ("timeout", st.sampled_from([0, 1_000_000])),
    ("custom_key", st.sampled_from(["text", 3, True, 1.5])),
    ("binary_data_output", st.booleans()),
    ("sequence_id", st.sampled_from([0, 7, "name"])),
    ("headers", st.just("x")),
)


@st.composite
def shapes(draw: st.DrawFn, model: ModelSpec, spec: TensorSpec) -> tuple[int, ...]:
    """A valid shape for ``spec`` most of the time; otherwise one dimension more, less, or wrong."""
    dims = [draw(st.integers(0, 3)) if d < 0 else d for d in spec.dims]
    if model.max_batch_size:
        dims.insert(0, draw(st.sampled_from([1, 1, 2, model.max_batch_size, 0, model.max_batch_size + 1])))
    bend = draw(st.sampled_from(["none"] * 6 + ["more", "less", "wrong", "negative"]))
    if bend == "more":
        dims.append(1)
    elif bend == "less" and dims:
        dims.pop()
    elif bend == "wrong" and dims:
        dims[-1] += 1
    elif bend == "negative" and dims:
        dims[0] = -1
    return tuple(dims)


@st.composite
def tensors(draw: st.DrawFn, model: ModelSpec, spec: TensorSpec) -> TensorCase:
    shape = draw(shapes(model, spec))
    datatype = draw(st.sampled_from([spec.datatype] * 8 + list(DATATYPES)))
    name = draw(st.sampled_from([spec.name] * 12 + ["BOGUS"]))
    mode = draw(st.sampled_from(["raw"] * 5 + ["typed"] * 4 + ["both", "none"]))
    count = max(0, math.prod(shape)) if all(d >= 0 for d in shape) else 1
    count += draw(st.sampled_from([0] * 8 + [1, -1]))
    return TensorCase(name, datatype, shape, mode, max(count, 0))


@st.composite
def infer_cases(draw: st.DrawFn, models: tuple[ModelSpec, ...] = INFER_MODELS) -> InferCase:
    model = draw(st.sampled_from(models))
    name = draw(st.sampled_from([model.name] * 10 + list(OTHER_NAMES)))
    inputs = [draw(tensors(model, spec)) for spec in model.inputs]
    drop = draw(st.sampled_from([None] * 8 + list(range(len(inputs)))))
    if drop is not None:
        del inputs[drop]
    if inputs and draw(st.integers(0, 12)) == 0:
        inputs.append(inputs[0])  # the same input twice
    outputs = draw(
        st.sampled_from(
            [None, None, tuple(t.name for t in model.outputs), (model.outputs[-1].name,), ("NOT_AN_OUTPUT",)]
        )
    )
    parameters = draw(st.lists(st.sampled_from(PARAMETERS), max_size=2, unique_by=lambda p: p[0]))
    chosen = tuple((key, draw(value)) for key, value in parameters)
    return InferCase(
        model=name,
        version=draw(st.sampled_from(VERSIONS)),
        request_id=draw(st.sampled_from(["", "", "req-1"])),
        inputs=tuple(inputs),
        outputs=outputs,
        parameters=chosen,
        extra_raw=draw(st.sampled_from([0] * 10 + [1])),
        spec=model,
    )


@dataclass(frozen=True)
class SequenceCase:
    """Steps of one sequence on ``sequence_sum``: each its START/END flags (None: not sent) and the
    kind of ``sequence_id`` (the number itself is given by the test, new for every case)."""

    id_kind: str  # "int", "string", "zero" or "none"
    steps: tuple[tuple[bool | None, bool | None], ...]
    bad_input: bool  # the last step sends a wrong shape


FLAG = st.sampled_from([True, False, None])


@st.composite
def sequence_cases(draw: st.DrawFn) -> SequenceCase:
    first = (draw(st.sampled_from([True, True, True, False, None])), draw(FLAG))
    rest = draw(st.lists(st.tuples(st.sampled_from([False, None, False, True]), FLAG), max_size=3))
    # The last step ENDs the sequence: an open one would hold the model's one slot until it expires.
    rest.append((draw(st.sampled_from([False, None])), True))
    return SequenceCase(
        id_kind=draw(st.sampled_from(["int"] * 6 + ["string", "zero", "none"])),
        steps=(first, *rest),
        bad_input=draw(st.sampled_from([False] * 6 + [True])),
    )


def sequence_request(case: SequenceCase, number: int, step: int) -> InferCase:
    start, end = case.steps[step]
    parameters: list[tuple[str, ParamValue]] = []
    if case.id_kind != "none":
        ids: dict[str, ParamValue] = {"int": number, "string": f"seq-{number}", "zero": 0}
        parameters.append(("sequence_id", ids[case.id_kind]))
    if start is not None:
        parameters.append(("sequence_start", start))
    if end is not None:
        parameters.append(("sequence_end", end))
    shape = (2,) if case.bad_input and step == len(case.steps) - 2 else (1,)  # not the END step
    tensor = TensorCase("INPUT", "FP32", shape, "raw", shape[0])
    return InferCase(SEQUENCE.name, "", "", (tensor,), None, tuple(parameters))


# --- model control, shared memory, metadata: each case a list of calls made in order -------------------

CONTROL_NAMES = (SPARE.name, SPARE.name, "no_such_model", "")
AFTER_CONTROL = "server readiness right after a model-control call"
PAGE_BYTES = 4096  # mmap offsets: Linux pages on x86-64 and most arm64 kernels


def _grpc(method: str, message: Message) -> GrpcCall:
    return GrpcCall(method, message.SerializeToString(deterministic=True), what=f"{method}({message})")


def _http(method: str, path: str, body: dict[str, object] | None = None) -> HttpCall:
    data = json.dumps(body).encode() if body is not None else b""
    return HttpCall(
        method,
        path,
        data,
        {"Content-Type": "application/json"} if data else {},
        what=f"{method} {path} {body}",
    )


@st.composite
def control_cases(draw: st.DrawFn) -> list[Call]:
    """Load or unload (``spare`` or a name that is no model), then the index and ``spare``'s readiness."""
    action = draw(st.sampled_from(["Load", "Unload"]))
    name = draw(st.sampled_from(CONTROL_NAMES))
    grpc_first = draw(st.booleans())
    ready = draw(st.booleans())
    if grpc_first:
        message: Message = getattr(service_pb2, f"RepositoryModel{action}Request")(model_name=name)
        first: Call = _grpc(f"RepositoryModel{action}", message)
    else:
        first = _http(
            "POST", f"/v2/repository/models/{quote(name)}/{action.lower()}", draw(st.sampled_from([None, {}]))
        )
    return [
        first,
        _grpc("RepositoryIndex", service_pb2.RepositoryIndexRequest(ready=ready)),
        _http("POST", "/v2/repository/index", {"ready": ready}),
        _grpc("ModelReady", service_pb2.ModelReadyRequest(name=SPARE.name)),
        _http("GET", f"/v2/models/{SPARE.name}/ready"),
        GrpcCall("ServerReady", b"", what=AFTER_CONTROL),
        HttpCall("GET", "/v2/health/ready", what=AFTER_CONTROL),
        # Loaded again, so every case (and the tests after these) starts with all models ready.
        _grpc("RepositoryModelLoad", service_pb2.RepositoryModelLoadRequest(model_name=SPARE.name)),
    ]


@st.composite
def shm_cases(draw: st.DrawFn, key: str, size_bytes: int) -> list[Call]:
    """Register a system shared-memory region (``key`` exists with ``size_bytes``), ask its status, unregister."""
    name = draw(st.sampled_from(["region", "region", ""]))
    chosen_key = draw(st.sampled_from([key, key, "/no_such_region", "", "no_slash"]))
    offset = draw(st.sampled_from([0, 0, PAGE_BYTES, 8, size_bytes, 2**40]))
    byte_size = draw(st.sampled_from([size_bytes, 16, 0, size_bytes + 1, 2**40]))
    if draw(st.booleans()):
        register: Call = _grpc(
            "SystemSharedMemoryRegister",
            service_pb2.SystemSharedMemoryRegisterRequest(
                name=name, key=chosen_key, offset=offset, byte_size=byte_size
            ),
        )
    else:
        body = {"key": chosen_key, "offset": offset, "byte_size": byte_size}
        register = _http("POST", f"/v2/systemsharedmemory/region/{quote(name)}/register", body)
    cleanup = _grpc("SystemSharedMemoryUnregister", service_pb2.SystemSharedMemoryUnregisterRequest(name=""))
    if offset % PAGE_BYTES and chosen_key == key and offset + byte_size <= size_bytes and name:
        # Triton maps the region at the offset itself and refuses one not on a page boundary; sonic
        # takes it (intended row shm-unaligned-offset): what follows would differ by that alone.
        return [register, cleanup]
    calls = [register]
    if draw(st.booleans()):
        calls.append(register)  # the same name twice
    calls += [
        _grpc("SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest(name=name)),
        _http(
            "GET",
            f"/v2/systemsharedmemory/region/{quote(name)}/status"
            if name
            else "/v2/systemsharedmemory/status",
        ),
        _grpc("SystemSharedMemoryUnregister", service_pb2.SystemSharedMemoryUnregisterRequest(name=name)),
        _http("POST", f"/v2/systemsharedmemory/region/{quote(name or 'region')}/unregister"),
        _grpc("SystemSharedMemoryUnregister", service_pb2.SystemSharedMemoryUnregisterRequest(name="")),
    ]
    return calls


METADATA_NAMES = (MIXED.name, BATCHED.name, SEQUENCE.name, "no_such_model", "")


@st.composite
def metadata_calls(draw: st.DrawFn) -> Call:
    name = draw(st.sampled_from(METADATA_NAMES))
    version = draw(st.sampled_from(VERSIONS))
    what = draw(
        st.sampled_from(
            ["ServerMetadata", "ModelMetadata", "ModelReady", "ModelConfig", "ServerReady", "ServerLive"]
        )
    )
    if draw(st.booleans()):
        if what.startswith("Server"):
            return _grpc(what, getattr(service_pb2, what + "Request")())
        return _grpc(what, getattr(service_pb2, what + "Request")(name=name, version=version))
    paths = {"ServerMetadata": "/v2", "ServerReady": "/v2/health/ready", "ServerLive": "/v2/health/live"}
    if what in paths:
        return _http("GET", paths[what])
    suffix = {"ModelMetadata": "", "ModelReady": "/ready", "ModelConfig": "/config"}[what]
    base = f"/v2/models/{quote(name)}" + (f"/versions/{quote(version)}" if version else "")
    return _http("GET", base + suffix)


# Triton's HTTP routes and the methods each takes ("{model}": a model, with or without a version).
ROUTE_METHODS = (
    ("/v2", "GET"), ("/v2/health/live", "GET"), ("/v2/health/ready", "GET"), ("/v2/models/stats", "GET"),
    ("{model}", "GET"), ("{model}/ready", "GET"), ("{model}/config", "GET"), ("{model}/stats", "GET"),
    ("{model}/infer", "POST"), ("/v2/repository/index", "POST"), ("/v2/logging", "GET POST"),
    ("/v2/repository/models/{name}/load", "POST"), ("/v2/repository/models/{name}/unload", "POST"),
    ("/v2/trace/setting", "GET POST"), ("/v2/models/{name}/trace/setting", "GET POST"),
    *(
        route
        for memory in ("systemsharedmemory", "cudasharedmemory")
        for route in (
            (f"/v2/{memory}/status", "GET"), (f"/v2/{memory}/region/region/status", "GET"),
            (f"/v2/{memory}/region/region/register", "POST"), (f"/v2/{memory}/unregister", "POST"),
            (f"/v2/{memory}/region/region/unregister", "POST"),
        )
    ),
)  # fmt: skip
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")


@st.composite
def wrong_method_calls(draw: st.DrawFn) -> Call:
    """A route of Triton's under a method it does not take (405 on both). Names are never empty: an
    empty one is no route to Triton (404; sonic routes it, row empty-model-name-route)."""
    path, allowed = draw(st.sampled_from(ROUTE_METHODS))
    method = draw(st.sampled_from([m for m in METHODS if m not in allowed.split()]))
    name = quote(draw(st.sampled_from([n for n in METADATA_NAMES if n])))
    version = draw(st.sampled_from(VERSIONS))
    model = f"/v2/models/{name}" + (f"/versions/{version}" if version else "")
    path = path.replace("{model}", model).replace("{name}", name)
    return HttpCall(method, path, what=f"{method} {path} (the route takes {allowed})")


@st.composite
def raw_calls(draw: st.DrawFn) -> HttpCall:
    """Triton's raw binary request to any model: the data of its one input, whole or bent, or any bytes."""
    model = draw(st.sampled_from(MODELS))
    name = draw(st.sampled_from([model.name] * 10 + ["no_such_model"]))
    spec = model.inputs[0]
    count = math.prod(d if d >= 0 else draw(st.integers(0, 3)) for d in spec.dims)
    how = draw(st.sampled_from(["valid"] * 4 + ["more", "less", "random"]))
    if how == "random":
        body = draw(st.binary(max_size=16))
    else:
        body = raw_bytes(spec.datatype, count)
        if spec.datatype == "BYTES":  # the raw body of a BYTES input is the element itself, no length prefix
            body = body[4:] if body else b""
        if how == "more":
            body += draw(st.binary(min_size=1, max_size=3))
        elif how == "less" and body:
            body = body[: draw(st.integers(0, len(body) - 1))]
    version = draw(st.sampled_from(VERSIONS))
    header = draw(st.sampled_from(["0"] * 5 + ["00"]))
    return raw_http(
        name, version, body, header, f"raw binary request to {name} version {version!r}: {body!r}"
    )


@st.composite
def malformed_calls(draw: st.DrawFn) -> Call:
    """Bytes that are not a valid request: random, or a valid request cut short or with a byte changed;
    over HTTP also a valid body chunked with a Content-Length beside (``chunked-with-content-length``)."""
    case = draw(infer_cases())
    choices: list[Call] = [infer_grpc(case), infer_http(case, binary_output=False)]
    valid = draw(st.sampled_from(choices))
    body = valid.payload if isinstance(valid, GrpcCall) else valid.body
    how = draw(st.sampled_from(["random", "cut", "flip", "framed twice"]))
    if how == "framed twice" and isinstance(valid, HttpCall):
        chunked = (f"{len(body):x}\r\n".encode() + body + b"\r\n" if body else b"") + b"0\r\n\r\n"
        headers = {**valid.headers, "Transfer-Encoding": "chunked", "Content-Length": str(len(chunked))}
        what = f"chunked with a Content-Length: {valid.what}"
        return HttpCall(valid.method, valid.path, chunked, headers, what=what, faults=valid.faults + 1)
    if how == "random":
        body = draw(st.binary(max_size=48))
    elif how == "cut" and body:
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif body:
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([body[at] ^ draw(st.integers(1, 255))]) + body[at + 1 :]
    # The corruption is one more fault on top of the case's own (random bytes: that one alone).
    faults = 1 if how == "random" else valid.faults + 1
    what = f"{how} of {valid.what}"
    if isinstance(valid, GrpcCall):
        return GrpcCall(valid.method, body, what=what, faults=faults)
    return HttpCall(valid.method, valid.path, body, valid.headers, what=what, faults=faults)


LOG_KEYS = (
    "log_info",
    "log_warning",
    "log_error",
    "log_verbose_level",
    "log_format",
    "log_file",
    "log_warnings",
)
LOG_VALUES = (True, False, 0, 1, 7, "default", "ISO8601", "xx", "1", None)
LOG_DEFAULTS = {
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}


def _log_request(settings: dict[str, object]) -> Message:
    request = service_pb2.LogSettingsRequest()
    for key, value in settings.items():
        entry = request.settings[key]
        if isinstance(value, bool):
            entry.bool_param = value
        elif isinstance(value, int):
            entry.uint32_param = value
        elif isinstance(value, str):
            entry.string_param = value
        else:
            entry.SetInParent()  # a value with no field set
    message: Message = request
    return message


@st.composite
def log_settings_cases(draw: st.DrawFn) -> list[Call]:
    """One change of one log setting (any key, any type), both servers' settings read back, then the
    defaults set again (every case starts from them: Triton applies a change key by key, sonic whole)."""
    key = draw(st.sampled_from(LOG_KEYS))
    value: object = draw(st.sampled_from(LOG_VALUES))
    if draw(st.booleans()):
        change: Call = _grpc("LogSettings", _log_request({key: value}))
    else:
        value = draw(st.sampled_from([value, value, 2**32, -1, 1.5]))
        change = _http("POST", "/v2/logging", {key: value})
    return [
        change,
        _grpc("LogSettings", service_pb2.LogSettingsRequest()),
        _http("GET", "/v2/logging"),
        _grpc("LogSettings", _log_request(LOG_DEFAULTS)),
        _http("POST", "/v2/logging", LOG_DEFAULTS),
    ]


TRACE_KEYS = ("trace_level", "trace_rate", "trace_count", "log_frequency", "trace_file", "trace_mode", "other")  # fmt: skip
TRACE_VALUES: tuple[object, ...] = (
    "1", "7", "0", "-1", "-2", " 12x", "abc", "", "99999999999", "4294967295", 5, None, True,
    ["TIMESTAMPS"], ["TENSORS"], ["OFF"], ["OFF", "TENSORS"], ["TIMESTAMPS", "TENSORS"], [], ["LOUD"], [1],
)  # fmt: skip
TRACE_CLEARED = dict.fromkeys(("trace_level", "trace_rate", "trace_count", "log_frequency"))


@st.composite
def trace_settings_cases(draw: st.DrawFn) -> list[Call]:
    """One change of one trace setting (global or a model's; any key, any value), both protocols' reads,
    then every field cleared again (on a server started without trace flags, as the harness's are)."""
    model = draw(st.sampled_from(["", MIXED.name, "no_such_model"]))
    path = f"/v2/models/{model}/trace/setting" if model else "/v2/trace/setting"
    key = draw(st.sampled_from(TRACE_KEYS))
    value = draw(st.sampled_from(TRACE_VALUES))
    if draw(st.booleans()):
        request = service_pb2.TraceSettingRequest(model_name=model)
        strings = value if isinstance(value, list) else [] if value is None else [str(value)]
        request.settings[key].value.extend(str(v) for v in strings)
        change: Call = _grpc("TraceSetting", request)
    else:
        change = _http("POST", path, {key: value})
    return [
        change,
        _grpc("TraceSetting", service_pb2.TraceSettingRequest(model_name=model)),
        _http("GET", path),
        _http("POST", path, TRACE_CLEARED),
    ]
