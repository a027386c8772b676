"""The message sites no Triton comparison reaches: sonic's own limits, flags and refusals, pinned word for word.

Triton 2.51 has no answer to hold these to (a limit or a flag it lacks, a configuration it takes and
sonic refuses, a shared-memory object sonic checks and Triton maps), so each case asserts sonic's exact
status and message (``Both.expect``); its site counts as reached (pinned), not as checked against
Triton. Two ``sonic serve`` processes, each started once for the module: ``own`` (explicit model
control, two repositories, ``--refuse-model-links-outside``) and ``limited`` (one HTTP connection per
client, ``--disable-repository-control``, 512 open files: 128 shared-memory regions); and starts that must fail (``--gpus 1`` with a model that
names GPU 3), whose exit code and stderr line are checked.
"""

from __future__ import annotations

import json
import os
import resource
import socket
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import tritonclient.utils.shared_memory as shm
from tests.integration.differential.calls import Caller, Endpoint, GrpcCall, HttpCall, Outcome
from tests.integration.differential.compare import Both, Session
from tests.integration.differential.faulty_models import DECOUPLED, IO, MATRIX, Faulty, write_faulty
from tests.integration.differential.repository import SPARE, write_repository
from tests.integration.differential.sonic_only_models import (
    ONNX_DECOUPLED,
    ONNX_SCALAR,
    write_onnx,
    write_sonic_only,
)
from tritonclient.grpc import service_pb2

from sonic.launch import ServerProcess
from sonic.launch.serve import ServerStartError

pytestmark = [pytest.mark.integration]

JSON = {"Content-Type": "application/json"}
OWN_ARGS = (
    "--model-control-mode=explicit",
    f"--load-model={SPARE.name}",
    f"--load-model={DECOUPLED.name}",
    f"--load-model={MATRIX.name}",
    f"--load-model={ONNX_SCALAR}",
    "--exit-on-error=false",
    "--strict-readiness=false",
    "--refuse-model-links-outside",
)
LIMITED_ARGS = (
    "--model-control-mode=explicit",
    f"--load-model={SPARE.name}",
    "--http-max-connections-per-client=1",
    "--disable-repository-control",
)
LIMITED_DESCRIPTORS = 512  # the limited server's open files: at most 128 shared-memory regions
TWICE = "twice"  # a model folder in both repositories of ``own``
LINKED = "linked"  # a model folder linked in from outside the repositories


@dataclass
class Own:
    both: Both  # Triton's side unused: sonic alone answers
    root: Path
    other: Path
    outside: Path


def _sonic(stack: ExitStack, roots: list[Path], args: tuple[str, ...], session: Session) -> Both:
    process = stack.enter_context(ServerProcess.start(roots, extra_args=["--http-port", "0", *args]))
    both = Both(None, Caller(Endpoint("sonic", process.grpc_address, process.http_address)), session)
    stack.callback(both.close)
    return both


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory, differential_session: Session) -> Iterator[Own]:
    base = tmp_path_factory.mktemp("sonic-only")
    root = write_repository(base / "models", (SPARE,))
    write_faulty(root, (DECOUPLED, MATRIX))
    write_sonic_only(root)
    write_onnx(root)
    twice = Faulty(TWICE, "")
    other = base / "other"
    write_faulty(root, (twice,))
    write_faulty(other, (twice,))
    outside = base / "outside"
    write_faulty(outside, (Faulty(LINKED, ""),))
    (root / LINKED).symlink_to(outside / LINKED, target_is_directory=True)
    with ExitStack() as stack:
        yield Own(_sonic(stack, [root, other], OWN_ARGS, differential_session), root, other, outside)


@contextmanager
def descriptor_limit(soft: int) -> Iterator[None]:
    """This process's soft limit of open files lowered for the block: a server started in it inherits
    the limit, and so holds at most half as many shared-memory regions (a descriptor each)."""
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (before, hard))


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory, differential_session: Session) -> Iterator[Both]:
    root = write_repository(tmp_path_factory.mktemp("sonic-limited") / "models", (SPARE,))
    with ExitStack() as stack:
        with descriptor_limit(LIMITED_DESCRIPTORS):
            both = _sonic(stack, [root], LIMITED_ARGS, differential_session)
        yield both


def _load(name: str, parameters: dict[str, tuple[str, object]] | None = None) -> GrpcCall:
    request = service_pb2.RepositoryModelLoadRequest(model_name=name)
    for key, (kind, value) in (parameters or {}).items():
        setattr(request.parameters[key], kind, value)
    return GrpcCall("RepositoryModelLoad", request.SerializeToString(deterministic=True), what=f"load {name}")


def _failed(name: str, reason: str) -> str:
    return f"failed to load '{name}', failed to poll from model repository: {reason}"


def _version_failed(name: str, reason: str) -> str:
    return f"load failed for model '{name}': version 1 is at UNAVAILABLE state: {reason};\n"


# What each load of sonic_only_models answers ({root}: the repository, {other}, {outside}).
LOADS: dict[str, tuple[str, str]] = {
    ONNX_DECOUPLED: (
        "INVALID_ARGUMENT",
        _version_failed(
            ONNX_DECOUPLED,
            "Invalid argument: model 'onnx_decoupled': the onnxruntime backend cannot serve decoupled models "
            "(model_transaction_policy {{ decoupled: true }}); only the python backend can",
        ),
    ),
    "secondary_devices": (
        "INVALID_ARGUMENT",
        _failed(
            "secondary_devices",
            "model 'secondary_devices': the configuration sets 'instance_group.secondary_devices', which "
            "sonic does not implement (Triton would act on it, so the model is not served without it)",
        ),
    ),
    "default_priority": (
        "INVALID_ARGUMENT",
        _failed(
            "default_priority",
            "model 'default_priority': default_priority_level 3 must be in 1..priority_levels (2)",
        ),
    ),
    "priority_policy": (
        "INVALID_ARGUMENT",
        _failed(
            "priority_policy",
            "model 'priority_policy': priority_queue_policy for level 3, but priority_levels is 2",
        ),
    ),
    "state_file_missing": (
        "INVALID_ARGUMENT",
        _version_failed(
            "state_file_missing",
            "Invalid argument: model 'state_file_missing': initial state file initial_state/init.bin: No such file or directory",
        ),
    ),
    "state_file_size": (
        "INVALID_ARGUMENT",
        _version_failed(
            "state_file_size",
            "Invalid argument: model 'state_file_size': initial state file initial_state/init.bin has 3 bytes, not [2] of int32",
        ),
    ),
    "state_variable_dims": (
        "INVALID_ARGUMENT",
        _version_failed(
            "state_variable_dims",
            "Invalid argument: model 'state_variable_dims': state 'S_IN' has variable dims [-1]: give an initial_state with "
            "fixed dims",
        ),
    ),
    "config_not_utf8": (
        "INVALID_ARGUMENT",
        _failed(
            "config_not_utf8",
            "{root}/config_not_utf8/config.pbtxt: model configuration is not UTF-8 text: 'utf-8' codec "
            "can't decode byte 0xff in position {position}: invalid start byte",
        ),
    ),
    "no_model_file": (
        "INVALID_ARGUMENT",
        _version_failed(
            "no_model_file", "Invalid argument: {root}/no_model_file/1/model.py: no such Python model file"
        ),
    ),
    "no_backend": (
        "INVALID_ARGUMENT",
        _failed(
            "no_backend",
            "model 'no_backend': the config names no backend or platform and no known model file was "
            "found in {root}/no_backend",
        ),
    ),
    "completion_returns_none": (
        "INVALID_ARGUMENT",
        _version_failed(
            "completion_returns_none",
            "Invalid argument: model 'completion_returns_none': auto_complete_config must return its ModelConfig argument, "
            "got NoneType",
        ),
    ),
    "completion_invalid": (
        "INVALID_ARGUMENT",
        _version_failed(
            "completion_invalid",
            "Invalid argument: model 'completion_invalid': auto_complete_config produced an invalid config: "
            "Failed to parse max_batch_size field: invalid literal for int() with base 10: 'many'.",
        ),
    ),
    TWICE: (
        "INVALID_ARGUMENT",
        "model 'twice' appears in more than one repository: {root} and {other}",
    ),
    LINKED: (
        "INVALID_ARGUMENT",
        (
            "model 'linked' resolves to {outside}/linked, outside the model repositories ['{root}', "
            "'{other}']; refusing to load it (the server was started with --refuse-model-links-outside)"
        ),
    ),
}


@pytest.mark.parametrize("name", list(LOADS))
def test_sonic_only_load(own: Own, name: str) -> None:
    code, message = LOADS[name]
    position = (own.root / "config_not_utf8" / "config.pbtxt").read_bytes().index(b"\xff")
    words = message.format(root=own.root, other=own.other, outside=own.outside, position=position)
    own.both.expect(_load(name), code, words)


def test_load_absent(own: Own) -> None:
    """Triton answers INTERNAL without a reason (row ``client-fault-not-internal``): sonic's words pinned."""
    own.both.expect(
        _load("absent"),
        "NOT_FOUND",
        f"failed to load 'absent': no model folder 'absent' in the model repositories "
        f"{[str(own.root), str(own.other)]}",
    )


def test_load_file_override(own: Own) -> None:
    call = _load(SPARE.name, {"file:1/model.py": ("bytes_param", b"pass\n")})
    own.both.expect(
        call,
        "INVALID_ARGUMENT",
        "load of 'spare': model file overrides ('file:1/model.py') are not supported; put files in the "
        "repository",
    )


def test_traffic_log_without_directory(own: Own) -> None:
    call = HttpCall("POST", "/v2/logging", json.dumps({"traffic_log": True}).encode(), JSON)
    own.both.expect(
        call,
        "400",
        "traffic_log: this server has no traffic-log directory; start sonic serve with --traffic-log DIR "
        "(and --traffic-log-start off to record only when asked)",
    )


def test_request_limits(own: Own) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    own.both.expect(
        HttpCall("POST", f"/v2/models/{SPARE.name}/infer", deep, JSON),
        "400",
        "inference request JSON is nested too deeply: more than about 1000 levels of arrays or objects",
    )
    own.both.expect(
        GrpcCall("ModelInfer", b"\x08" + b"\xff" * 11),
        "INVALID_ARGUMENT",
        "malformed protobuf message: varint too long",
    )
    own.both.expect(
        HttpCall("POST", f"/v2/models/{SPARE.name}/infer", b"not gzip", {**JSON, "Content-Encoding": "gzip"}),
        "400",
        "gzip request body: cannot decompress the message: Error -3 while decompressing data: incorrect header check",
    )


def test_malformed_health_check(own: Own) -> None:
    handle = own.both.sonic.channel.unary_unary(
        "/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None
    )
    try:
        handle(b"\x12\x01x", timeout=30)
        outcome = Outcome("OK")
    except grpc.RpcError as exc:
        outcome = Outcome(exc.code().name, exc.details() or "")
    own.both.pinned(
        outcome, "INVALID_ARGUMENT", "malformed HealthCheckRequest: expected only field 1 (service)"
    )


def test_decoupled_output_to_shared_memory(own: Own) -> None:
    key = f"/sonic_differential_{os.getpid():08d}_only"
    handle = shm.create_shared_memory_region("only", key, 64)
    register = json.dumps({"key": key, "offset": 0, "byte_size": 64}).encode()
    try:
        assert (
            own.both.sonic(HttpCall("POST", "/v2/systemsharedmemory/region/o/register", register, JSON)).code
            == "200"
        )
        request = service_pb2.ModelInferRequest(model_name=DECOUPLED.name, id="s1")
        request.inputs.add(name="X", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
        output = request.outputs.add(name="OUT_X")
        output.parameters["shared_memory_region"].string_param = "o"
        output.parameters["shared_memory_byte_size"].int64_param = 4
        own.both.expect(
            GrpcCall("ModelStreamInfer", request.SerializeToString(deterministic=True)),
            "STREAM_ERROR",
            "model 'decoupled' is decoupled: its outputs cannot go to shared memory (each of its responses "
            "would overwrite the region)",
        )
    finally:
        own.both.sonic(HttpCall("POST", "/v2/systemsharedmemory/region/o/unregister"))
        shm.destroy_shared_memory_region(handle)


def _register(name: str, key: str) -> HttpCall:
    body = json.dumps({"key": key, "offset": 0, "byte_size": 8}).encode()
    return HttpCall("POST", f"/v2/systemsharedmemory/region/{name}/register", body, JSON)


def test_shared_memory_objects(own: Own) -> None:
    """Objects under /dev/shm that are not what a shared-memory key claims: a FIFO, a hard link, another
    user's (root may hand one to another user: this runs as root or skips that case)."""
    stem = f"sonic_differential_{os.getpid():08d}"
    fifo, linked, link, foreign = (Path("/dev/shm") / f"{stem}_{kind}" for kind in ("fifo", "a", "b", "user"))
    made: list[Path] = []
    try:
        os.mkfifo(fifo)
        made.append(fifo)
        linked.write_bytes(b"\0" * 8)
        made.append(linked)
        os.link(linked, link)
        made.append(link)
        where = "unable to open shared memory region '{}' (key '/{}')"
        own.both.expect(
            _register("fifo", f"/{fifo.name}"),
            "400",
            where.format("fifo", fifo.name) + ": it is a FIFO, not a shared memory object",
        )
        own.both.expect(
            _register("link", f"/{link.name}"),
            "400",
            where.format("link", link.name) + ": it has 2 links; a shared memory object has one (hard links "
            "are refused)",
        )
        if os.geteuid() == 0:
            foreign.write_bytes(b"\0" * 8)
            made.append(foreign)
            os.chown(foreign, 4321, 4321)
            own.both.expect(
                _register("user", f"/{foreign.name}"),
                "403",
                where.format("user", foreign.name) + ": it belongs to user 4321, not to the server's user 0; "
                "start the server with --allow-shm-from-other-users to take other users' objects",
            )
    finally:
        for path in made:
            path.unlink()


def test_shared_memory_keys_not_objects(own: Own) -> None:
    """A key that names a symbolic link or a folder under /dev/shm."""
    stem = f"sonic_differential_{os.getpid():08d}"
    symlink, folder = Path("/dev/shm") / f"{stem}_symlink", Path("/dev/shm") / f"{stem}_folder"
    symlink.symlink_to("/dev/null")
    folder.mkdir()
    where = "unable to open shared memory region '{}' (key '/{}')"
    try:
        own.both.expect(
            _register("symlink", f"/{symlink.name}"),
            "400",
            where.format("symlink", symlink.name)
            + ": it is a symbolic link; shared memory objects are opened without following links",
        )
        own.both.expect(
            _register("folder", f"/{folder.name}"),
            "400",
            where.format("folder", folder.name) + ": it is a directory, not a shared memory object",
        )
    finally:
        symlink.unlink()
        folder.rmdir()


def test_shared_memory_truncated(own: Own) -> None:
    """A region whose object the client truncates after registering it: an input read from it."""
    key = f"/sonic_differential_{os.getpid():08d}_cut"
    handle = shm.create_shared_memory_region("cut", key, 16)
    body = json.dumps({"key": key, "offset": 0, "byte_size": 16}).encode()
    try:
        registered = own.both.sonic(
            HttpCall("POST", "/v2/systemsharedmemory/region/cut/register", body, JSON)
        )
        assert registered.code == "200"
        os.truncate(Path("/dev/shm") / key.removeprefix("/"), 0)
        reference = {"shared_memory_region": "cut", "shared_memory_byte_size": 2, "shared_memory_offset": 4}
        infer = {"inputs": [{"name": "X", "datatype": "UINT8", "shape": [2], "parameters": reference}]}
        own.both.expect(
            HttpCall("POST", f"/v2/models/{SPARE.name}/infer", json.dumps(infer).encode(), JSON),
            "400",
            f"model 'spare' input 'X': shared memory region 'cut' (key '{key}'): 2 bytes at offset 4 need the "
            "object to hold 6 bytes, it holds 0 now (truncated after it was registered)",
        )
    finally:
        own.both.sonic(HttpCall("POST", "/v2/systemsharedmemory/region/cut/unregister"))
        shm.destroy_shared_memory_region(handle)


def test_shape_past_numpy(own: Own) -> None:
    """A shape with a 0 whose dimensions multiply past what numpy can index (no elements, so the byte
    size and element count agree): sonic refuses it; Triton 2.51 hands it to the Python backend, whose
    stub process dies (INTERNAL ``Stub process 'matrix_0' is not healthy.``, and so for every later
    request to the model), an answer no comparison can hold sonic to."""
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [0, 2**62], "data": []}]}
    own.both.expect(
        HttpCall("POST", f"/v2/models/{MATRIX.name}/infer", json.dumps(body).encode(), JSON),
        "400",
        f"model 'matrix' input 'X': shape [0, {2**62}] cannot be used: array is too big; `arr.size * "
        "arr.dtype.itemsize` is larger than the maximum possible size.",
    )


def test_onnx_output_without_batch(own: Own) -> None:
    """A batched ONNX model whose output has no batch dimension (a sum over every axis): its rows cannot
    go back to the requests (Triton's ONNX Runtime backend, absent here, refuses it in its own words)."""
    request = service_pb2.ModelInferRequest(model_name=ONNX_SCALAR)
    request.inputs.add(name="X", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1.0)
    own.both.expect(
        GrpcCall("ModelInfer", request.SerializeToString(deterministic=True)),
        "INTERNAL",
        "model 'onnx_scalar' output 'OUT_X' has shape [], expected batch dimension 1 first",
    )


def test_path_component_dot_dot(own: Own) -> None:
    own.both.expect(
        HttpCall("GET", "/v2/models/%2e%2e/ready"),
        "400",
        "invalid path '/v2/models/%2e%2e/ready': names are one path component, without '.' or '..'",
    )


def test_repository_control_disabled(limited: Both) -> None:
    limited.expect(
        _load(SPARE.name),
        "PERMISSION_DENIED",
        "model load is disabled on this server (started with --disable-repository-control)",
    )


def test_most_regions(limited: Both) -> None:
    """Regions past the most the server holds (a quarter of its descriptors: two each), all on one
    object, over gRPC."""
    key = f"/sonic_differential_{os.getpid():08d}_many"
    handle = shm.create_shared_memory_region("many", key, 8)
    most = LIMITED_DESCRIPTORS // 4
    try:
        for index in range(most + 1):
            message = service_pb2.SystemSharedMemoryRegisterRequest(
                name=f"r{index}", key=key, offset=0, byte_size=8
            )
            outcome = limited.sonic(GrpcCall("SystemSharedMemoryRegister", message.SerializeToString()))
            if index < most:
                assert outcome.code == "OK", outcome
        limited.pinned(
            outcome,
            "RESOURCE_EXHAUSTED",
            f"shared memory region 'r{most}': this server holds {most} regions, its most (each keeps file "
            "descriptors open); unregister some first",
        )
    finally:
        unregister = service_pb2.SystemSharedMemoryUnregisterRequest()
        limited.sonic(GrpcCall("SystemSharedMemoryUnregister", unregister.SerializeToString()))
        shm.destroy_shared_memory_region(handle)


def test_connections_per_client(limited: Both) -> None:
    """A second HTTP connection from the same address while the first is open is refused (429)."""
    host, port = limited.sonic.endpoint.http.rsplit(":", 1)
    request = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    with closing(socket.create_connection((host, int(port)))) as first:
        first.sendall(request)
        assert first.recv(4096).startswith(b"HTTP/1.1 200")  # held open: keep-alive
        outcome = limited.sonic(HttpCall("GET", "/v2/health/live"))
    limited.pinned(
        outcome,
        "429",
        "more than 1 concurrent HTTP connections from this client; reuse connections (keep-alive)",
    )


GPU_CONFIG = (
    f'name: "gpu3"\nbackend: "python"\nmax_batch_size: 0\n{IO}'
    "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 3 ] } ]\n"
)
FAILED_TO_LOAD = "error: creating server: Internal - failed to load all models"  # Triton's line
# flags, the last line of stderr ({root}: the repository)
START_UPS = {
    "gpu id": (
        ("--gpus", "1"),
        (
            "sonic serve: model 'gpu3': Invalid argument: instance group gpu3_0 of model gpu3 specifies "
            "invalid or unsupported gpu id 3; the GPUs available are 0..0 (--exit-on-error=false serves "
            "the others)"
        ),
    ),
    "no such model": (
        ("--model-control-mode=explicit", "--load-model=gpu3", "--load-model=absent", "--gpus", "4"),
        (
            "sonic serve: model 'absent': failed to load 'absent': no model folder 'absent' in the model "
            "repositories ['{root}'] (--exit-on-error=false serves the others)"
        ),
    ),
}


@pytest.mark.parametrize("case", list(START_UPS))
def test_start_up_refusal(tmp_path: Path, differential_session: Session, case: str) -> None:
    """``sonic serve`` on a repository it refuses: start-up ends with exit status 1, Triton's line, then
    the model's reason (the server-launch helper keeps stderr in its log)."""
    flags, last = START_UPS[case]
    root = tmp_path / "models"
    write_faulty(root, (Faulty("gpu3", ""),))
    (root / "gpu3" / "config.pbtxt").write_text(GPU_CONFIG, encoding="utf-8")
    log = tmp_path / "serve.log"
    with pytest.raises(ServerStartError, match="exited with code 1 before ready"):
        ServerProcess.start([root], extra_args=flags, log_path=log)
    lines = log.read_text(encoding="utf-8").splitlines()
    differential_session.hits.pin(differential_session.test, lines[-1])
    assert lines[-2:] == [FAILED_TO_LOAD, last.format(root=root)]
