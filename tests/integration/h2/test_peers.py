"""Independent HTTP/2 peers against the native gRPC port: curl (libcurl's nghttp2) and h2load.

Neither knows gRPC: each gets a hand-built length-prefixed message, and the test reads the response
and the trailers as those tools show them. h2load comes from Debian's nghttp2-client, unpacked by
``tools/install-test-deps.sh`` (run here if ``./dev test`` has not yet).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from sonic.launch import ServerProcess

ROOT = Path(__file__).resolve().parents[3]
H2LOAD = ROOT / ".tools" / "nghttp2" / "bin" / "h2load"
SERVICE = "inference.GRPCInferenceService"


def _framed(message: bytes) -> bytes:
    return struct.pack(">BI", 0, len(message)) + message


def _infer_request() -> bytes:
    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])  # its data: raw_input_contents[0]
    request.raw_input_contents.append(np.arange(16, dtype=np.float32).tobytes())
    return bytes(request.SerializeToString())


@pytest.fixture(scope="module")
def h2load() -> Path:
    if not H2LOAD.exists():
        result = subprocess.run(
            [str(ROOT / "tools" / "install-test-deps.sh")], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            pytest.skip(
                f"h2load is not installed: tools/install-test-deps.sh failed: {result.stderr[-2000:]}"
            )
    return H2LOAD


def _curl(address: str, method: str, body: bytes, tmp_path: Path) -> tuple[str, bytes]:
    """Headers and trailers as curl dumps them, and the response body."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    request, response = tmp_path / "request.bin", tmp_path / "response.bin"
    request.write_bytes(body)
    result = subprocess.run(
        [
            "curl", "--http2-prior-knowledge", "--silent", "--show-error", "--max-time", "20",
            "--dump-header", "-", "--output", str(response), "--request", "POST",
            "--header", "content-type: application/grpc", "--header", "te: trailers",
            "--data-binary", f"@{request}", f"http://{address}/{SERVICE}/{method}",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout, response.read_bytes()


def test_curl_model_infer(h2_server: ServerProcess, tmp_path: Path) -> None:
    dump, body = _curl(h2_server.grpc_address, "ModelInfer", _framed(_infer_request()), tmp_path)
    assert dump.startswith("HTTP/2 200"), dump
    assert re.search(r"^grpc-status: 0\r?$", dump, re.MULTILINE), f"no grpc-status 0 trailer in:\n{dump}"
    flag, length = struct.unpack(">BI", body[:5])
    assert (flag, length) == (0, len(body) - 5)
    reply = service_pb2.ModelInferResponse.FromString(body[5:])
    assert reply.model_name == "identity"
    assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == list(range(16))


def test_curl_error_in_trailers(h2_server: ServerProcess, tmp_path: Path) -> None:
    request = service_pb2.ModelMetadataRequest(name="no_such_model").SerializeToString()
    dump, body = _curl(h2_server.grpc_address, "ModelMetadata", _framed(request), tmp_path)
    assert dump.startswith("HTTP/2 200"), dump
    assert re.search(r"^grpc-status: 5\r?$", dump, re.MULTILINE), dump  # NOT_FOUND
    assert "no_such_model" in dump
    assert body == b""


def test_h2load_many_streams(h2_server: ServerProcess, h2load: Path, tmp_path: Path) -> None:
    """4 connections, 32 streams each at a time, 4,000 ModelInfer calls: every one answered 200."""
    request = tmp_path / "request.bin"
    request.write_bytes(_framed(_infer_request()))
    result = subprocess.run(
        [
            str(h2load), "--requests", "4000", "--clients", "4", "--max-concurrent-streams", "32",
            "--data", str(request), "--header", "content-type: application/grpc", "--header", "te: trailers",
            f"http://{h2_server.grpc_address}/{SERVICE}/ModelInfer",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "requests: 4000 total, 4000 started, 4000 done, 4000 succeeded, 0 failed, 0 errored" in result.stdout
    ), result.stdout
    assert "status codes: 4000 2xx" in result.stdout, result.stdout
