"""``sonic serve``'s start-up and readiness, as Triton 2.51's (each compared with the real one where it runs).

- A model that fails to load ends start-up with exit status 1 and Triton's line (``--exit-on-error``
  defaults to true); with ``--exit-on-error=false`` the server serves the others and is not ready
  (``--strict-readiness`` defaults to true: HTTP 400, gRPC ServerReady false) until
  ``--strict-readiness=false``.
- A ``--model-repository`` that does not exist, or is not a folder, ends start-up with exit status 1 in
  Triton's words, naming the path; so does the second of two.
- A port in use fails at once, before the models load (Triton finds it only after loading them).
- A request for a model with no loaded version answers Triton's words, then sonic's reason.
- A repository that holds something but serves no model says so in the log.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from tests.integration.triton_helpers import (
    backend_directory_or_skip,
    run_triton_to_exit,
    triton_environment,
)
from tritonclient.grpc import service_pb2, service_pb2_grpc

from sonic.launch import ServerProcess
from sonic.launch.process import free_port, terminate
from sonic.launch.triton import tritonserver_command

pytestmark = pytest.mark.integration

IDENTITY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""
CONFIG = """backend: "python"
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]
"""
FAILED_TO_LOAD = "error: creating server: Internal - failed to load all models"
NO_VERSIONS = "Request for unknown model: 'broken' has no available versions"
START_TIMEOUT_S = 120


def _model(repository: Path, name: str, source: str) -> None:
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(CONFIG)
    (repository / name / "1" / "model.py").write_text(source)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """``good``, and ``broken``, whose module raises at import."""
    root = tmp_path / "models"
    _model(root, "good", IDENTITY)
    _model(root, "broken", "raise RuntimeError('boom at import')\n" + IDENTITY)
    return root


def _serve(*argv: str, timeout_s: float = START_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sonic.cli.main", "serve", "--grpc-port", "0", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


# --- a model that fails to load ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags", [[], ["--exit-on-error=true"], ["--exit-on-error"]], ids=["default", "true", "alone"]
)
def test_a_model_that_fails_to_load_stops_start_up(repository: Path, flags: list[str]) -> None:
    result = _serve("--model-repository", str(repository), *flags)
    assert result.returncode == 1
    assert FAILED_TO_LOAD in result.stderr.splitlines()  # Triton's line, whole
    assert "model 'broken'" in result.stderr
    assert "boom at import" in result.stderr  # then why
    assert "sonic: ready" not in result.stdout


EXPLICIT_NO_SUCH_MODEL = ["--model-control-mode=explicit", "--load-model=good", "--load-model=nosuch"]


def test_a_load_model_that_names_no_model_stops_start_up(repository: Path) -> None:
    result = _serve("--model-repository", str(repository), *EXPLICIT_NO_SUCH_MODEL)
    assert result.returncode == 1
    assert FAILED_TO_LOAD in result.stderr.splitlines()
    assert "model 'nosuch'" in result.stderr


@pytest.mark.triton
@pytest.mark.parametrize("flags", [[], EXPLICIT_NO_SUCH_MODEL], ids=["broken", "no-such-model"])
def test_triton_stops_start_up_alike(repository: Path, tmp_path: Path, flags: list[str]) -> None:
    result = run_triton_to_exit([repository], tmp_path, *flags)
    assert result.returncode == 1
    assert _last_line(result.stderr) == FAILED_TO_LOAD


# --- a repository that cannot be read ------------------------------------------------------------------


def _missing_cases(repository: Path, tmp_path: Path) -> list[tuple[list[Path], str]]:
    typo, a_file = tmp_path / "typo", tmp_path / "a_file"
    a_file.write_text("not a folder")
    return [
        ([typo], f"error: creating server: Internal - failed to stat file {typo}"),
        ([repository, typo], f"error: creating server: Internal - failed to stat file {typo}"),
        ([a_file], "error: creating server: Invalid argument - repository path is not a valid directory"),
    ]


def test_a_repository_that_cannot_be_read_stops_start_up(repository: Path, tmp_path: Path) -> None:
    for roots, line in _missing_cases(repository, tmp_path):
        argv = [arg for root in roots for arg in ("--model-repository", str(root))]
        started = time.monotonic()
        result = _serve(*argv, "--exit-on-error=false")  # whatever --exit-on-error says
        assert result.returncode == 1, roots
        assert line in result.stderr.splitlines()
        assert f"--model-repository {roots[-1]}" in result.stderr  # ours: which one
        assert time.monotonic() - started < 60  # before any model loads (good is not loaded first)
        assert "loading models" not in result.stderr


@pytest.mark.parametrize("url", ["s3://bucket/models", "gs://bucket/models", "as://account/c/models"])
def test_a_cloud_repository_is_refused_saying_why(url: str) -> None:
    result = _serve("--model-repository", url)
    assert result.returncode == 1
    assert f"error: creating server: Internal - failed to stat file {url.replace('//', '/')}" in (
        result.stderr.splitlines()
    )
    assert "cloud storage (s3://, gs://, as://) is not supported" in result.stderr
    assert "loading models" not in result.stderr


@pytest.mark.triton
def test_triton_refuses_a_repository_that_cannot_be_read_alike(repository: Path, tmp_path: Path) -> None:
    for roots, line in _missing_cases(repository, tmp_path):
        if len(roots) > 1:
            continue  # Triton fails the same way; without --exit-on-error=false it would load first
        result = run_triton_to_exit(roots, tmp_path)
        assert result.returncode == 1
        assert _last_line(result.stderr) == line


# --- ports before models -----------------------------------------------------------------------------


def test_a_port_in_use_fails_before_the_models_load(tmp_path: Path) -> None:
    slow = "import time\n" + IDENTITY.replace(
        "class TritonPythonModel:\n",
        "class TritonPythonModel:\n    def initialize(self, args):\n        time.sleep(300)\n\n",
    )
    _model(tmp_path / "models", "slow", slow)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = _serve(
            "--model-repository", str(tmp_path / "models"), "--grpc-port", str(port), timeout_s=60
        )
    assert result.returncode == 1
    assert "address already in use" in result.stderr.lower()
    assert time.monotonic() - started < 60  # the slow model (300 s) was never waited for
    assert "model slow loaded" not in result.stderr


# --- readiness and the words for a model that failed --------------------------------------------------


@dataclass(frozen=True)
class Running:
    grpc: str
    http: str


@contextmanager
def _sonic(repository: Path, *flags: str) -> Iterator[Running]:
    with ServerProcess.start([repository], extra_args=["--http-port", "0", *flags]) as process:
        yield Running(process.grpc_address, process.http_address)


@contextmanager
def _triton_serving(repository: Path, tmp_path: Path, *flags: str) -> Iterator[Running]:
    """Triton, once its front ends answer. Its log says when they start, after loading, and HTTP answers
    a moment later: then live is asked with backoff, as ``sonic.launch.triton.wait_until_ready`` asks
    (Triton gives no signal of its own, and a server that is not ready none of readiness either). A
    thread reads the log to its end, so that Triton never blocks on the pipe."""
    ports = {"grpc": free_port(), "http": free_port(), "metrics": free_port()}
    backends = backend_directory_or_skip(tmp_path / "triton")
    command = tritonserver_command([repository], ports, backend_directory=backends, extra_args=flags)
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=triton_environment()
    )
    listening, lines = threading.Event(), []

    def read_log() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if "Started HTTPService" in line:
                listening.set()

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    try:
        assert listening.wait(START_TIMEOUT_S), "".join(lines[-20:])
        running = Running(f"127.0.0.1:{ports['grpc']}", f"127.0.0.1:{ports['http']}")
        _answer_live(running.http)
        yield running
    finally:
        terminate(process, 30)
        reader.join()
        if process.stderr is not None:
            process.stderr.close()


def _answer_live(address: str, timeout_s: float = 30) -> None:
    deadline, delay_s = time.monotonic() + timeout_s, 0.05
    while True:
        with contextlib.suppress(urllib.error.URLError):
            if _http(address, "/v2/health/live")[0] == 200:
                return
        assert time.monotonic() < deadline, f"Triton at {address} did not answer live within {timeout_s} s"
        time.sleep(delay_s)  # backoff between questions: Triton gives no signal
        delay_s = min(delay_s * 2, 1.0)


@contextmanager
def _running(kind: str, repository: Path, tmp_path: Path, *flags: str) -> Iterator[Running]:
    server = _sonic(repository, *flags) if kind == "sonic" else _triton_serving(repository, tmp_path, *flags)
    with server as running:
        yield running


def _http(address: str, path: str, body: bytes | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://{address}{path}", data=body, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _grpc_ready(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return bool(stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=30).ready)


def _health_check(address: str) -> bytes:
    with grpc.insecure_channel(address) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None
        )
        answer: bytes = check(b"", timeout=30)
        return answer


SERVING, NOT_SERVING = b"\x08\x01", b"\x08\x02"
KINDS = ["sonic", pytest.param("triton", marks=pytest.mark.triton)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "not-strict"])
def test_a_server_serving_a_failed_model_is_not_ready(
    kind: str, strict: bool, repository: Path, tmp_path: Path
) -> None:
    flags = ["--exit-on-error=false", *([] if strict else ["--strict-readiness=false"])]
    with _running(kind, repository, tmp_path, *flags) as server:
        assert _http(server.http, "/v2/health/ready")[0] == (400 if strict else 200)
        assert _http(server.http, "/v2/health/live")[0] == 200
        assert _grpc_ready(server.grpc) is not strict
        assert _health_check(server.grpc) == (NOT_SERVING if strict else SERVING)
        assert _http(server.http, "/v2/models/good/ready")[0] == 200  # the others serve


INFER = json.dumps({"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})


@pytest.mark.parametrize("kind", KINDS)
def test_a_model_with_no_loaded_version_answers_tritons_words_then_why(
    kind: str, repository: Path, tmp_path: Path
) -> None:
    with _running(kind, repository, tmp_path, "--exit-on-error=false") as server:
        for path, body in (
            ("/v2/models/broken", None),
            ("/v2/models/broken/config", None),
            ("/v2/models/broken/infer", INFER.encode()),
        ):
            status, text = _http(server.http, path, body)
            assert status == 404, path
            message = json.loads(text)["error"]
            assert message.startswith(NO_VERSIONS), path
            if kind == "sonic":
                assert "version 1 is UNAVAILABLE" in message, path  # then its versions and why
                assert "boom at import" in message, path
        status, text = _http(server.http, "/v2/models/broken/versions/1")
        assert status == 503
        assert json.loads(text)["error"].startswith(
            "Request for unknown model: 'broken' version 1 is not at ready state"
        )
        assert _http(server.http, "/v2/models/broken/ready")[0] == 400
        with grpc.insecure_channel(server.grpc) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert not stub.ModelReady(service_pb2.ModelReadyRequest(name="broken"), timeout=30).ready
            for call, request in (
                (stub.ModelMetadata, service_pb2.ModelMetadataRequest(name="broken")),
                (stub.ModelConfig, service_pb2.ModelConfigRequest(name="broken")),
                (stub.ModelInfer, service_pb2.ModelInferRequest(model_name="broken")),
            ):
                with pytest.raises(grpc.RpcError) as info:
                    call(request, timeout=30)
                assert info.value.code() == grpc.StatusCode.NOT_FOUND
                assert (info.value.details() or "").startswith(NO_VERSIONS)


# --- nothing served --------------------------------------------------------------------------------


def test_serving_no_model_from_a_repository_that_holds_something_is_a_warning(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    repository.mkdir()
    (repository / "README").write_text("the models are one folder down")
    with ServerProcess.start([repository]) as process:
        log = process.log_path.read_text(encoding="utf-8")
    assert "WARNING" in log
    assert "serving 0 models from model repositories" in log
    assert "1 entries (0 model folders)" in log
