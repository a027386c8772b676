"""The backend registry: built-ins, and plugins found through ``sonic.backends`` entry points."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sonic.protocol.errors import ModelConfigError
from sonic.server.backends import backend_class, detect_backend
from sonic.server.backends.base import Backend

pytestmark = pytest.mark.unit

PLUGIN = """
from sonic.server.backends.base import Backend


class Doubler(Backend):
    name = "ipu_demo"
    default_filename = "model.ipu"

    def __init__(self, context):
        self.context = context

    def execute(self, inputs, output_names):
        return {name: 2 * inputs["X"] for name in output_names}
"""


@pytest.fixture
def plugin_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    (tmp_path / "sonic_ipu_demo.py").write_text(PLUGIN)
    info = tmp_path / "sonic_ipu_demo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sonic-ipu-demo\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[sonic.backends]\nipu_demo = sonic_ipu_demo:Doubler\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("sonic_ipu_demo", None)


@pytest.mark.parametrize(
    ("name", "class_name"),
    [
        ("pytorch", "PyTorchBackend"),
        ("python", "PythonBackend"),
        ("trees", "TreesBackend"),
        ("fil", "FilBackend"),
        ("ensemble", "EnsembleBackend"),
        ("onnxruntime", "OnnxRuntimeBackend"),
    ],
)
def test_builtin_backends(name: str, class_name: str) -> None:
    cls = backend_class(name)
    assert cls.__name__ == class_name
    assert cls.name == name


def test_entry_point_plugin_is_found(plugin_on_path: None) -> None:
    cls = backend_class("ipu_demo")
    assert issubclass(cls, Backend)
    assert cls.__module__ == "sonic_ipu_demo"
    assert detect_backend({"model.ipu", "notes.txt"}) == "ipu_demo"


def test_unknown_backend_lists_available(plugin_on_path: None) -> None:
    with pytest.raises(ModelConfigError, match=r"unknown backend 'fpga'.*ipu_demo.*pytorch"):
        backend_class("fpga")


def test_detect_builtin_files() -> None:
    assert detect_backend({"model.py"}) == "python"
    assert detect_backend({"model.pt"}) == "pytorch"
    assert detect_backend({"xgboost.json"}) == "trees"
