"""ONNX Runtime backend (Triton's ``onnxruntime_onnx`` platform).

``--backend-config [onnxruntime,]default-max-batch-size=N`` (default 4): the ``max_batch_size`` auto-complete
gives a model that can batch, as Triton's (0: none). Config ``parameters`` (or ``--backend-config
onnxruntime,KEY=VALUE``):
``intra_op_thread_count``, ``inter_op_thread_count`` (0 = onnxruntime's default),
``enable_mem_arena`` (default ``1``), ``enable_mem_pattern`` (default ``0``: merged batches change
shape all the time), ``execution_mode`` (Triton's ``0`` sequential / ``1`` parallel; the names
``sequential``/``parallel`` are accepted too), ``graph_optimization_level`` (``disable``/``basic``/
``extended``/``all``; sonic's own spelling, it wins over the config's ``optimization { graph { level } }``,
which means what it means to Triton's onnxruntime backend: ``-1`` basic, ``1`` extended, ``2`` none,
anything else all),
``max_execution_batch_size`` (default ``0``, off: run merged batches larger than this in slices of
this size, bounding activation memory), ``intra_op_spinning`` (sonic's own; default ``1``,
onnxruntime's: the intra-op threads spin-wait for work between parallel sections; ``0``: they sleep,
which leaves the cores to the server's event loop and the clients on a host whose cores they share).
``model_operations { op_library_filename }``: custom-operator libraries registered with the session.
GPU instances use the CUDA execution provider (TensorRT first when the config's
``optimization.execution_accelerators`` asks for ``tensorrt``) and need ``onnxruntime-gpu``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InternalError, InvalidArgumentError, ModelConfigError
from sonic.protocol.model_config import complete_from_signature, default_max_batch_size
from sonic.server.backends.base import Backend, InstanceContext
from sonic.server.backends.signature import ModelSignature, TensorInfo, check_config

log = logging.getLogger(__name__)

# ONNX TensorProto element types to Triton config enums.
_ONNX_TO_CONFIG = {
    1: model_config_pb2.TYPE_FP32,
    2: model_config_pb2.TYPE_UINT8,
    3: model_config_pb2.TYPE_INT8,
    4: model_config_pb2.TYPE_UINT16,
    5: model_config_pb2.TYPE_INT16,
    6: model_config_pb2.TYPE_INT32,
    7: model_config_pb2.TYPE_INT64,
    8: model_config_pb2.TYPE_STRING,
    9: model_config_pb2.TYPE_BOOL,
    10: model_config_pb2.TYPE_FP16,
    11: model_config_pb2.TYPE_FP64,
    12: model_config_pb2.TYPE_UINT32,
    13: model_config_pb2.TYPE_UINT64,
    16: model_config_pb2.TYPE_BF16,
}

# onnxruntime's NodeArg.type strings to Triton config enums.
_ORT_TYPES = {
    "tensor(float)": model_config_pb2.TYPE_FP32,
    "tensor(uint8)": model_config_pb2.TYPE_UINT8,
    "tensor(int8)": model_config_pb2.TYPE_INT8,
    "tensor(uint16)": model_config_pb2.TYPE_UINT16,
    "tensor(int16)": model_config_pb2.TYPE_INT16,
    "tensor(int32)": model_config_pb2.TYPE_INT32,
    "tensor(int64)": model_config_pb2.TYPE_INT64,
    "tensor(string)": model_config_pb2.TYPE_STRING,
    "tensor(bool)": model_config_pb2.TYPE_BOOL,
    "tensor(float16)": model_config_pb2.TYPE_FP16,
    "tensor(double)": model_config_pb2.TYPE_FP64,
    "tensor(uint32)": model_config_pb2.TYPE_UINT32,
    "tensor(uint64)": model_config_pb2.TYPE_UINT64,
    "tensor(bfloat16)": model_config_pb2.TYPE_BF16,
}

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# Triton's onnxruntime backend reads ``optimization { graph { level } }`` this way; other values: all.
_TRITON_GRAPH_LEVELS = {-1: "basic", 1: "extended", 2: "disable"}
_EXECUTION_MODES = {
    "0": ort.ExecutionMode.ORT_SEQUENTIAL,
    "1": ort.ExecutionMode.ORT_PARALLEL,
    "sequential": ort.ExecutionMode.ORT_SEQUENTIAL,
    "parallel": ort.ExecutionMode.ORT_PARALLEL,
}


def _session_modes(context: InstanceContext) -> tuple[ort.ExecutionMode, ort.GraphOptimizationLevel]:
    """Execution mode and graph optimisation level, with Triton's numbers (and sonic's names)."""
    model = context.config.name
    mode = context.parameter("execution_mode") or "0"
    if mode not in _EXECUTION_MODES:
        raise ModelConfigError(
            f"model '{model}': execution_mode '{mode}', expected 0 (sequential) or 1 (parallel)"
        )
    graph_level = int(context.config.optimization.graph.level)
    level = context.parameter("graph_optimization_level") or _TRITON_GRAPH_LEVELS.get(graph_level, "all")
    if level not in _OPT_LEVELS:
        raise ModelConfigError(
            f"model '{model}': graph_optimization_level '{level}', expected one of {', '.join(_OPT_LEVELS)}"
        )
    return _EXECUTION_MODES[mode], _OPT_LEVELS[level]


def _spinning(context: InstanceContext) -> str:
    """``intra_op_spinning``: whether onnxruntime's intra-op threads spin-wait for work (``1``, its default)."""
    spinning = context.parameter("intra_op_spinning") or "1"
    if spinning not in {"0", "1"}:
        raise ModelConfigError(
            f"model '{context.config.name}': intra_op_spinning '{spinning}', expected 0 (the intra-op threads "
            "sleep between parallel sections) or 1 (they spin-wait, onnxruntime's default)"
        )
    return spinning


def session_signature(session: ort.InferenceSession) -> ModelSignature:
    """The session's inputs, outputs and overridable initializers, as Triton's backend reads them."""

    def describe(args: Sequence[Any]) -> list[TensorInfo]:
        return [
            TensorInfo(
                arg.name,
                _ORT_TYPES.get(arg.type, model_config_pb2.TYPE_INVALID),
                tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape or ()),
            )
            for arg in args
        ]

    return ModelSignature(
        describe(session.get_inputs()),
        describe(session.get_outputs()),
        describe(session.get_overridable_initializers()),
    )


def _signature(model_path: Path) -> tuple[list[tuple[str, int, list[int]]], list[tuple[str, int, list[int]]]]:
    import onnx  # noqa: PLC0415  (only needed when a config must be completed)

    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001  (onnx raises many types for a bad file)
        raise ModelConfigError(f"{model_path}: cannot read ONNX model: {exc}") from None
    initializers = {init.name for init in model.graph.initializer}

    def describe(values: Sequence[object]) -> list[tuple[str, int, list[int]]]:
        result = []
        for value in values:
            tensor_type = value.type.tensor_type  # type: ignore[attr-defined]
            if tensor_type.elem_type not in _ONNX_TO_CONFIG:
                raise ModelConfigError(
                    f"{model_path}: tensor '{value.name}' has ONNX element type "  # type: ignore[attr-defined]
                    f"{tensor_type.elem_type}, which has no Triton datatype"
                )
            dims = [
                d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1
                for d in tensor_type.shape.dim
            ]
            result.append((value.name, _ONNX_TO_CONFIG[tensor_type.elem_type], dims))  # type: ignore[attr-defined]
        return result

    graph_inputs = [v for v in model.graph.input if v.name not in initializers]
    return describe(graph_inputs), describe(model.graph.output)


class OnnxRuntimeBackend(Backend):
    name: ClassVar[str] = "onnxruntime"
    default_filename: ClassVar[str] = "model.onnx"

    @classmethod
    def complete_config(
        cls, config: model_config_pb2.ModelConfig, model_path: Path, options: Mapping[str, str]
    ) -> None:
        batch_default = default_max_batch_size(cls.name, options)
        if config.input and config.output:
            return
        if not model_path.is_file():
            raise ModelConfigError(
                f"model '{config.name}': no config inputs/outputs and no model file {model_path} to read them from"
            )
        inputs, outputs = _signature(model_path)
        complete_from_signature(config, inputs, outputs, batch_default)

    def __init__(self, context: InstanceContext) -> None:
        # Triton's onnxruntime backend reads default-max-batch-size when it starts, for every model:
        # one it cannot read fails the load even where nothing is completed.
        default_max_batch_size(self.name, context.options)
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(context.parameter("intra_op_thread_count") or 0)
        options.inter_op_num_threads = int(context.parameter("inter_op_thread_count") or 0)
        options.enable_cpu_mem_arena = (context.parameter("enable_mem_arena") or "1") != "0"
        # Memory patterns are planned per input shape; dynamic batching makes a new shape for almost
        # every execution, and re-planning made merged EmTrkMichelId batches up to 9x slower here.
        options.enable_mem_pattern = (context.parameter("enable_mem_pattern") or "0") != "0"
        options.execution_mode, options.graph_optimization_level = _session_modes(context)
        options.add_session_config_entry("session.intra_op.allow_spinning", _spinning(context))
        for library in context.op_libraries():  # model_operations: custom operators the model uses
            try:
                options.register_custom_ops_library(str(library))
            except Exception as exc:  # noqa: BLE001  (onnxruntime raises its own types)
                raise ModelConfigError(
                    f"model '{context.config.name}': onnxruntime cannot load op library {library}: {exc}"
                ) from None
        providers = self._providers(context)
        try:
            self._session = ort.InferenceSession(str(context.model_path), options, providers=providers)
        except Exception as exc:  # noqa: BLE001  (any load failure marks the model unavailable)
            raise ModelConfigError(
                f"{context.model_path}: onnxruntime cannot load the model: {exc}"
            ) from None
        # As Triton's onnxruntime backend: a configuration the model does not match fails the load here,
        # not every request later with onnxruntime's words.
        check_config(context.config, session_signature(self._session))
        self._model = context.config.name
        self._cpu = context.device_kind != "gpu"  # outputs are bound to host memory only on CPU
        self._run_options = ort.RunOptions()
        chunk = context.parameter("max_execution_batch_size") or "0"
        if not chunk.isdigit():
            raise ModelConfigError(
                f"model '{self._model}': max_execution_batch_size must be a whole number, got '{chunk}'"
            )
        # Activations grow with the batch (EmTrkMichelId: ~0.75 MB per sample); running big merged
        # batches in fixed-size slices bounds memory and gives onnxruntime one steady shape.
        # Ragged inputs are flat (not by rows), so a batch with them cannot be cut into row slices.
        ragged = any(t.allow_ragged_batch for t in context.config.input) or bool(context.config.batch_input)
        self._chunk = int(chunk) if context.spec.batched and not ragged else 0

    @staticmethod
    def _providers(context: InstanceContext) -> list[str | tuple[str, dict[str, str]]]:
        if context.device_kind != "gpu":
            return ["CPUExecutionProvider"]
        available = ort.get_available_providers()
        if "CUDAExecutionProvider" not in available:
            raise ModelConfigError(
                f"model '{context.config.name}' asks for a GPU instance, but onnxruntime has no CUDA "
                f"execution provider (available: {', '.join(available)}); install sonic-inference[gpu]"
            )
        device = {"device_id": str(context.device_id)}
        providers: list[str | tuple[str, dict[str, str]]] = []
        accelerators = context.config.optimization.execution_accelerators.gpu_execution_accelerator
        if any(acc.name == "tensorrt" for acc in accelerators) and "TensorrtExecutionProvider" in available:
            providers.append(("TensorrtExecutionProvider", device))
        providers += [("CUDAExecutionProvider", device), "CPUExecutionProvider"]
        return providers

    @classmethod
    def convert_input(cls, model: str, name: str, array: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """onnxruntime's Python API takes string tensors as arrays of ``str``: decode BYTES elements."""
        if array.dtype != np.object_:
            return array
        try:
            decoded = [
                item.decode("utf-8") if isinstance(item, bytes) else item for item in array.reshape(-1)
            ]
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(
                f"model '{model}' input '{name}': onnxruntime string tensors must be UTF-8 text, got {exc}"
            ) from None
        result = np.empty(array.shape, dtype=np.object_)
        result.reshape(-1)[:] = decoded
        return result

    @property
    def runs_on_any_thread(self) -> bool:
        """A CPU session: ``InferenceSession.run`` may be called from any thread (onnxruntime documents it
        thread safe); a GPU one stays on the thread that made its device current."""
        return self._cpu

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        names = list(output_names)
        total = len(next(iter(inputs.values())))
        if not self._chunk or total <= self._chunk:
            return dict(zip(names, self._run(names, dict(inputs)), strict=True))
        parts = [
            self._run(names, {key: array[start : start + self._chunk] for key, array in inputs.items()})
            for start in range(0, total, self._chunk)
        ]
        return {name: np.concatenate([part[i] for part in parts]) for i, name in enumerate(names)}

    def execute_into(
        self,
        inputs: Mapping[str, npt.NDArray[Any]],
        output_names: Sequence[str],
        buffers: Mapping[str, npt.NDArray[Any]],
    ) -> dict[str, npt.NDArray[Any]]:
        """With every output bound to its buffer, onnxruntime writes the results there: no copy after."""
        names = list(output_names)
        total = len(next(iter(inputs.values())))
        if not self._cpu or any(n not in buffers for n in names) or (self._chunk and total > self._chunk):
            return self.execute(inputs, output_names)
        outs = [buffers[n] for n in names]
        if any(
            np.may_share_memory(o, a) for i, o in enumerate(outs) for a in [*inputs.values(), *outs[i + 1 :]]
        ):
            # A region used for an input and an output too: written during the run, it would change the
            # inputs under the model. The plain run writes it only once the model is done, as Triton does.
            return self.execute(inputs, output_names)
        binding = self._session.io_binding()
        try:
            for key, array in inputs.items():
                binding.bind_cpu_input(key, array)
            for name in names:
                out = buffers[name]
                binding.bind_output(name, "cpu", 0, out.dtype.type, list(out.shape), out.ctypes.data)
            self._session.run_with_iobinding(binding, self._run_options)
        except Exception as exc:  # noqa: BLE001  (the plain run below reports real failures)
            # A model whose outputs differ from the config in shape or type, or a dtype onnxruntime cannot
            # bind (strings): the plain run decides, and the server copies its results as before.
            log.debug("model '%s': running into shared memory failed, running plainly: %s", self._model, exc)
            return self.execute(inputs, output_names)
        return {name: buffers[name] for name in names}

    def _run(self, names: list[str], feeds: dict[str, npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
        try:
            results: list[npt.NDArray[Any]] = self._session.run(names, feeds, self._run_options)
        except Exception as exc:  # noqa: BLE001  (fails this batch only)
            raise InternalError(f"model '{self._model}': onnxruntime execution failed: {exc}") from None
        return results
