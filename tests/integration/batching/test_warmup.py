"""model_warmup runs before a model reports ready; a failing sample refuses the load, named."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sonic.launch import ServerProcess
from sonic.models.simple import identity_model

pytestmark = pytest.mark.integration

COUNTED = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.calls = 0
            self.seen = 0.0

        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                self.calls += 1
                self.seen += float(x.sum())
                out = np.array([[self.calls, self.seen]], dtype=np.float64)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("CALLS", out)]))
            return responses
    """
)

WARMUP = """
model_warmup [
  { name: "zeros" batch_size: 2 count: 3 inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } },
  { name: "file" batch_size: 1 inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "x.bin" } } },
  { name: "random" batch_size: 1 inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } }
]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("warmup")
    counted = root / "counted"
    (counted / "1").mkdir(parents=True)
    (counted / "1" / "model.py").write_text(COUNTED)
    (counted / "warmup").mkdir()
    (counted / "warmup" / "x.bin").write_bytes(np.full(4, 100.0, dtype=np.float32).tobytes())
    (counted / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "CALLS" data_type: TYPE_FP64 dims: [ 2 ] } ]\n' + WARMUP
    )
    broken = root / "broken"
    identity_model(broken / "1" / "model.onnx")
    (broken / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'model_warmup [ { name: "missing" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_FP32 '
        'dims: [ 16 ] input_data_file: "nope.bin" } } } ]\n'
    )
    # The broken model is served beside the others (Triton's default would end start-up).
    with ServerProcess.start([root], extra_args=["--exit-on-error=false"]) as process:
        yield process


def test_samples_ran_before_the_first_request(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        tensor = grpcclient.InferInput("X", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 4), dtype=np.float32))
        calls, seen = client.infer("counted", [tensor]).as_numpy("CALLS")[0]
    # zeros x3, the file (4 x 100.0) once, random once, then this request: the sixth execution.
    assert calls == 6
    assert 400.0 <= seen < 404.0  # the file's 400 plus four random numbers in [0, 1)


def test_a_failing_sample_refuses_the_load(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "warmup 'missing' input 'INPUT0': cannot read" in index["broken"]["reason"]
    assert "nope.bin" in index["broken"]["reason"]
