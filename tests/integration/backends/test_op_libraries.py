"""model_operations { op_library_filename }: custom operators for onnxruntime and PyTorch models.

The PyTorch library is built here from a few lines of C++ against the installed torch (g++); the
onnxruntime one is onnxruntime-extensions' library (its ``NegPos`` operator), since the onnxruntime
wheel ships no C API headers to build one.
"""

from __future__ import annotations

import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import pytest
import torch
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper

from sonic.launch import ServerProcess
from sonic.models.simple import IR_VERSION, OPSET

pytestmark = pytest.mark.integration

extensions = pytest.importorskip("onnxruntime_extensions")

OP_SOURCE = """
#include <ATen/ATen.h>
#include <torch/library.h>

at::Tensor twice_plus(const at::Tensor& x, double c) { return x * 2 + c; }

TORCH_LIBRARY(sonic_test, m) { m.def("twice_plus(Tensor x, float c) -> Tensor", twice_plus); }
"""


def build_torch_op_library(folder: Path) -> Path:
    """A TORCH_LIBRARY shared library built with g++ against this torch."""
    from torch.utils import cpp_extension  # noqa: PLC0415

    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ to build a custom operator")
    source = folder / "op.cpp"
    source.write_text(OP_SOURCE)
    library = folder / "libsonic_test.so"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    command = [compiler, "-O1", "-shared", "-fPIC", "-std=c++20", str(source), "-o", str(library)]
    command += [f"-I{p}" for p in cpp_extension.include_paths()]
    command += [f"-L{p}" for p in cpp_extension.library_paths()]
    command += ["-ltorch", "-ltorch_cpu", "-lc10", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    return library


class TwicePlus(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = torch.ops.sonic_test.twice_plus(x, 1.0)
        return result


def negpos_model(path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("NegPos", ["X"], ["NEG", "POS"], domain="ai.onnx.contrib")],
        "negpos",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 3])],
        [
            helper.make_tensor_value_info("NEG", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("POS", TensorProto.FLOAT, ["batch", 3]),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.contrib", 1)]
    )
    model.ir_version = IR_VERSION
    path.parent.mkdir(parents=True)
    onnx.save(model, str(path))


ONNX_CONFIG = """
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "NEG" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "POS" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("ops")
    library = build_torch_op_library(tmp_path_factory.mktemp("build"))
    torch.ops.load_library(str(library))  # type: ignore[no-untyped-call]
    (root / "twice_plus" / "1").mkdir(parents=True)
    with torch.no_grad(), warnings.catch_warnings():
        # TorchScript is what pytorch_libtorch repositories hold; torch 2.13 calls it deprecated.
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(TwicePlus(), torch.ones(2, 3))  # type: ignore[no-untyped-call]
    traced.save(str(root / "twice_plus" / "1" / "model.pt"))
    shutil.copy(library, root / "twice_plus" / library.name)  # relative to the model's folder
    (root / "twice_plus" / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        f'model_operations {{ op_library_filename: [ "{library.name}" ] }}\n'
    )
    for name, operations in (
        ("negpos", 'model_operations { op_library_filename: [ "libortextensions.so" ] }\n'),
        ("negpos_without_library", ""),
    ):
        negpos_model(root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(ONNX_CONFIG + operations)
    # A library installed elsewhere: linked into the model's folder, followed as the repository's links are
    # (a configuration names only files inside its folder: docs/security.md). The model without its
    # library fails to load beside the others (Triton's default would end start-up).
    (root / "negpos" / "libortextensions.so").symlink_to(extensions.get_library_path())
    with ServerProcess.start([root], extra_args=["--exit-on-error=false"]) as process:
        yield process


def infer(address: str, model: str, name: str, array: npt.NDArray[np.float32]) -> grpcclient.InferResult:
    tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    with grpcclient.InferenceServerClient(address) as client:
        return client.infer(model, [tensor])


def test_torch_custom_op(server: ServerProcess) -> None:
    x = np.array([[1.0, -2.0, 3.0]], dtype=np.float32)
    result = infer(server.grpc_address, "twice_plus", "INPUT__0", x)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), x * 2 + 1)


def test_onnxruntime_custom_op(server: ServerProcess) -> None:
    x = np.array([[-1.0, 2.0, -3.0]], dtype=np.float32)
    result = infer(server.grpc_address, "negpos", "X", x)
    np.testing.assert_array_equal(result.as_numpy("NEG"), [[-1.0, 0.0, -3.0]])
    np.testing.assert_array_equal(result.as_numpy("POS"), [[0.0, 2.0, 0.0]])


def test_without_the_library_the_load_fails(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index["negpos_without_library"]["state"] == "UNAVAILABLE"
    assert "NegPos" in index["negpos_without_library"]["reason"]
