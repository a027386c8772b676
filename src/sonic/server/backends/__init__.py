"""Backend registry: built-in backends, and others through the ``sonic.backends`` entry points.

A third-party package (an FPGA or IPU runtime, say) registers ``name = "module:Class"`` under the
``sonic.backends`` entry-point group; the class implements :class:`sonic.server.backends.base.Backend`.
A model selects it with ``backend: "name"`` in its config.pbtxt. See docs/backends.md.

- frameworks: :mod:`.onnxruntime`, :mod:`.pytorch`, :mod:`.tensorflow`, :mod:`.trees` (XGBoost, LightGBM,
  scikit-learn), :mod:`.hls4ml` (with :mod:`.hls4ml_build` and the FPGA driver interface :mod:`.fpga`);
- :mod:`.python`: Triton Python-backend models, with ``triton_python_backend_utils`` in :mod:`.pb_utils`,
  :mod:`.pb_config` (``auto_complete_config``), :mod:`.pb_logging` (``Logger``), :mod:`.pb_metrics` (``MetricFamily``), :mod:`.pb_decoupled`
  (the response sender);
- :mod:`.ensemble`: the ``ensemble`` platform's registry entry (its scheduler is in the runtime);
- :mod:`.signature`: a model file's declared tensors and the configuration checked against them at load.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from sonic.protocol.errors import ModelConfigError
from sonic.server.backends.base import Backend, InstanceContext

__all__ = ["Backend", "InstanceContext", "backend_class", "detect_backend"]

# name -> "module:Class"; imported on first use so a missing optional framework only matters
# for the models that need it.
BUILTIN_BACKENDS = {
    "onnxruntime": "sonic.server.backends.onnxruntime:OnnxRuntimeBackend",
    "pytorch": "sonic.server.backends.pytorch:PyTorchBackend",
    "python": "sonic.server.backends.python:PythonBackend",
    "trees": "sonic.server.backends.trees:TreesBackend",
    # Triton's FIL backend name, so FIL model repositories load unchanged.
    "fil": "sonic.server.backends.trees:FilBackend",
    # An ensemble is a scheduler: its entry lives with it in the runtime (imported by name, as every entry).
    "ensemble": "sonic.server.runtime.ensemble:EnsembleBackend",
    # TensorFlow (the `tensorflow` extra): Triton's backend name and its two platforms' file layouts.
    "tensorflow": "sonic.server.backends.tensorflow:TensorFlowBackend",
    "tensorflow_graphdef": "sonic.server.backends.tensorflow:TensorFlowGraphDefBackend",
    "tensorflow_savedmodel": "sonic.server.backends.tensorflow:TensorFlowSavedModelBackend",
    # FPGA firmware through hls4ml's C simulation (the `hls4ml` extra; g++ at load).
    "hls4ml": "sonic.server.backends.hls4ml:Hls4mlBackend",
}

ENTRY_POINT_GROUP = "sonic.backends"


def _registered() -> dict[str, str]:
    found = dict(BUILTIN_BACKENDS)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, entry.value)
    return found


def backend_class(name: str) -> type[Backend]:
    registered = _registered()
    if name not in registered:
        raise ModelConfigError(f"unknown backend '{name}', available: {', '.join(sorted(registered))}")
    module_name, _, class_name = registered[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelConfigError(f"backend '{name}' cannot be imported: {exc}") from None
    cls = getattr(module, class_name)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise ModelConfigError(f"backend '{name}' ({registered[name]}) is not a sonic Backend class")
    return cls


def detect_backend(filenames: set[str]) -> str | None:
    """Guess a backend from the files of a version folder, as Triton does for configless models."""
    for name in _registered():
        try:
            cls = backend_class(name)
        except ModelConfigError:
            continue
        if cls.default_filename in filenames:
            return name
    return None
