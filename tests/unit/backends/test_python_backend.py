"""The Python backend in-process: request lists, per-request results, and model mistakes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from sonic.protocol.errors import InternalError, ModelConfigError, UnimplementedError
from sonic.protocol.model_config import fill_defaults, parse_config_text, validate_config
from sonic.server.backends.base import InstanceContext, Request
from sonic.server.backends.python import PythonBackend

pytestmark = pytest.mark.unit

CONFIG = """
name: "m"
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""

MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x[0, 0] < 0:
                responses.append(pb_utils.InferenceResponse([], pb_utils.TritonError("no", pb_utils.TritonError.UNSUPPORTED)))
            elif x[0, 0] > 100:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.astype(np.float64))]))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
        if len(requests) == 3:
            return responses[:2]
        return responses
"""


def make_backend(tmp_path: Path, source: str = MODEL, config_text: str = CONFIG) -> PythonBackend:
    version = tmp_path / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(textwrap.dedent(source))
    config = parse_config_text(config_text, "test")
    PythonBackend.auto_complete_config(config, version / "model.py")
    fill_defaults(config, default_filename="model.py", gpu_count=0)
    context = InstanceContext(
        config, validate_config(config), 1, version, version / "model.py", "m_0_0", "cpu", 0
    )
    return PythonBackend(context)


def request(value: float) -> Request:
    return Request({"X": np.full((1, 2), value, dtype=np.float32)}, ["Y"])


def test_each_request_gets_its_own_result(tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    try:
        assert backend._model.args["model_repository"] == str(tmp_path / "m")
        assert backend._model.args["model_instance_kind"] == "CPU"
        ok, refused, wrong_dtype, again = backend.execute_requests(
            [request(1.0), request(-1.0), request(200.0), request(3.0)]
        )
        assert isinstance(ok, dict)
        np.testing.assert_array_equal(ok["Y"], [[2.0, 2.0]])
        assert isinstance(refused, UnimplementedError)
        assert isinstance(wrong_dtype, InternalError)
        assert "has numpy dtype float64, but the config declares FP32" in str(wrong_dtype)
        assert isinstance(again, dict)
        with pytest.raises(InternalError, match=r"one response per request \(3\), got 2 responses"):
            backend.execute_requests([request(1.0)] * 3)
    finally:
        backend.close()


def test_load_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(
        ModelConfigError, match=r"AttributeError: module '1\.model' has no attribute 'TritonPythonModel'"
    ):
        make_backend(tmp_path / "a", "x = 1\n")
    with pytest.raises(
        ModelConfigError, match=r"(?s)ZeroDivisionError: division by zero.*importing the model"
    ):
        make_backend(tmp_path / "b", "1 / 0\n")


BYTES_CONFIG = """
name: "m"
backend: "python"
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

BYTES_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            upper = np.array([item.upper() for item in text], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("UPPER", upper)]))
        return responses
"""


def test_bytes_tensors(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, BYTES_MODEL, BYTES_CONFIG)
    try:
        text = np.array([b"muon", b"jet"], dtype=np.object_)
        (result,) = backend.execute_requests([Request({"TEXT": text}, ["UPPER"])])
        assert isinstance(result, dict)
        assert result["UPPER"].tolist() == [b"MUON", b"JET"]
    finally:
        backend.close()
