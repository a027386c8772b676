"""A backend added from outside the package through the ``sonic.backends`` entry-point group.

The test writes a real (tiny) installed distribution: a module and its ``.dist-info`` with an
``entry_points.txt``, on a folder put on the server's PYTHONPATH. The model folder has no
config.pbtxt: the plugin is found by its default file name and completes the config itself.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration

PLUGIN_MODULE = '''
"""Stands in for an FPGA runtime: Y = X @ W, W read from the model's weights.npy."""

import numpy as np
from tritonclient.grpc import model_config_pb2

from sonic.server.backends.base import Backend


class LinearAccelerator(Backend):
    name = "fpga_demo"
    default_filename = "weights.npy"

    @classmethod
    def auto_complete_config(cls, config, model_path):
        if config.input:
            return
        weights = np.load(model_path)
        config.max_batch_size = 64
        config.input.add(name="X", data_type=model_config_pb2.TYPE_FP32, dims=[weights.shape[0]])
        config.output.add(name="Y", data_type=model_config_pb2.TYPE_FP32, dims=[weights.shape[1]])

    def __init__(self, context):
        self._weights = np.load(context.model_path)

    def execute(self, inputs, output_names):
        return {"Y": inputs["X"] @ self._weights}
'''


def write_plugin_distribution(site: Path) -> None:
    """What ``pip install`` of a package declaring the entry point leaves in site-packages."""
    (site / "sonic_fpga_demo.py").write_text(textwrap.dedent(PLUGIN_MODULE).lstrip())
    info = site / "sonic_fpga_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sonic-fpga-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[sonic.backends]\nfpga_demo = sonic_fpga_demo:LinearAccelerator\n"
    )
    (info / "RECORD").write_text("")


@pytest.fixture(scope="module")
def plugin_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, npt.NDArray[Any]]]:
    root = tmp_path_factory.mktemp("plugin")
    site = root / "site"
    site.mkdir()
    write_plugin_distribution(site)
    weights = np.random.default_rng(30).normal(size=(5, 2)).astype(np.float32)
    version = root / "models" / "linear" / "1"
    version.mkdir(parents=True)
    np.save(version / "weights.npy", weights)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    with ServerProcess.start([root / "models"], env=env) as server:
        yield server, weights


def test_entry_point_backend_serves_configless_model(
    plugin_server: tuple[ServerProcess, npt.NDArray[Any]],
) -> None:
    server, weights = plugin_server
    x = np.random.default_rng(31).normal(size=(3, 5)).astype(np.float32)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        config = client.get_model_config("linear", as_json=True)["config"]
        assert config["backend"] == "fpga_demo"
        tensor = grpcclient.InferInput("X", [3, 5], "FP32")
        tensor.set_data_from_numpy(x)
        served = client.infer("linear", [tensor]).as_numpy("Y")
    np.testing.assert_array_equal(served, x @ weights)
