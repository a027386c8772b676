"""PyTorch backend (Triton's ``pytorch_libtorch`` platform): TorchScript ``.pt`` and ``torch.export`` ``.pt2``.

The file kind follows the model file's suffix: ``.pt2`` is loaded with ``torch.export.load``,
anything else with ``torch.jit.load``. Execution runs under ``torch.inference_mode``.

Tensor names, as in Triton: config inputs named ``<anything>__<index>`` (``INPUT__0``) are passed
by that index; else inputs whose names are exactly the ``forward`` argument names are passed as
those arguments; else inputs go by their order in the config. Outputs named ``<anything>__<index>``
take that element of the returned tuple; else outputs are matched by position (or by key when
``forward`` returns a dict).

Config ``parameters`` (or ``--backend-config pytorch,KEY=VALUE``), Triton's names:
``INFERENCE_MODE`` (default ``true``), ``DISABLE_OPTIMIZED_EXECUTION`` (TorchScript, default
``false``), ``INTRA_OP_THREAD_COUNT`` and ``INTER_OP_THREAD_COUNT``. PyTorch's thread pools are
per process: the last model that sets them wins, and inter-op threads can only be set before
the first parallel work, so later attempts are logged and ignored.

Config auto-complete reads ``.pt2`` files, which carry their signature; TorchScript files do not,
so their configs must declare inputs and outputs.

``model_operations { op_library_filename }``: libraries of custom operators (``TORCH_LIBRARY``)
loaded with ``torch.ops.load_library`` before the model.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import ml_dtypes
import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InternalError, ModelConfigError
from sonic.protocol.model_config import complete_from_signature, default_max_batch_size
from sonic.server.backends.base import Backend, InstanceContext
from sonic.server.backends.signature import ModelSignature, TensorInfo, check_config, expected_input_count

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'sonic-inference[torch]'"


_INDEXED_NAME = re.compile(r"^.*__(\d+)$")


def _import_torch() -> Any:
    try:
        import torch  # noqa: PLC0415  (optional framework, imported when a model needs it)
    except ImportError:
        raise ModelConfigError(f"the pytorch backend needs PyTorch: {INSTALL_HINT}") from None
    return torch


def _config_types(torch: Any) -> dict[Any, int]:
    return {
        torch.bool: model_config_pb2.TYPE_BOOL,
        torch.uint8: model_config_pb2.TYPE_UINT8,
        torch.int8: model_config_pb2.TYPE_INT8,
        torch.int16: model_config_pb2.TYPE_INT16,
        torch.int32: model_config_pb2.TYPE_INT32,
        torch.int64: model_config_pb2.TYPE_INT64,
        torch.float16: model_config_pb2.TYPE_FP16,
        torch.float32: model_config_pb2.TYPE_FP32,
        torch.float64: model_config_pb2.TYPE_FP64,
        torch.bfloat16: model_config_pb2.TYPE_BF16,
    }


def _index_order(names: Sequence[str]) -> list[int] | None:
    """Indices from ``NAME__<i>`` names when every name has one and they are 0..n-1."""
    matches = [_INDEXED_NAME.match(name) for name in names]
    if not names or not all(matches):
        return None
    indices = [int(m[1]) for m in matches if m]
    return indices if sorted(indices) == list(range(len(names))) else None


def _load_program(torch: Any, model_path: Path) -> Any:
    try:
        return torch.export.load(str(model_path))
    except Exception as exc:  # noqa: BLE001  (torch raises many types for a bad file)
        raise ModelConfigError(f"{model_path}: cannot read torch.export program: {exc}") from None


def _program_signature(
    torch: Any, program: Any, where: object
) -> tuple[list[tuple[str, int, list[int]]], list[tuple[str, int, list[int]]]]:
    """The program's user inputs (by argument name) and outputs (``OUTPUT__i``, by position)."""
    types = _config_types(torch)
    nodes = {node.name: node for node in program.graph.nodes}

    def describe(node_name: str, tensor_name: str) -> tuple[str, int, list[int]]:
        value = nodes[node_name].meta.get("val")
        if value is None or not hasattr(value, "dtype") or value.dtype not in types:
            raise ModelConfigError(
                f"{where}: tensor '{tensor_name}' has no Triton datatype "
                f"({getattr(value, 'dtype', type(value).__name__)})"
            )
        dims = [d if isinstance(d, int) else -1 for d in value.shape]
        return tensor_name, types[value.dtype], dims

    signature = program.graph_signature
    inputs = [describe(name, name) for name in signature.user_inputs]
    outputs = [describe(name, f"OUTPUT__{index}") for index, name in enumerate(signature.user_outputs)]
    return inputs, outputs


class PyTorchBackend(Backend):
    name: ClassVar[str] = "pytorch"
    default_filename: ClassVar[str] = "model.pt"

    @classmethod
    def complete_config(
        cls, config: model_config_pb2.ModelConfig, model_path: Path, options: Mapping[str, str]
    ) -> None:
        if config.input and config.output:
            return
        if model_path.suffix != ".pt2":
            raise ModelConfigError(
                f"model '{config.name}': TorchScript files carry no tensor signature, so the config must "
                "declare input and output (or export the model with torch.export to a .pt2 file)"
            )
        if not model_path.is_file():
            raise ModelConfigError(
                f"model '{config.name}': no config inputs/outputs and no model file {model_path} to read them from"
            )
        torch = _import_torch()
        inputs, outputs = _program_signature(torch, _load_program(torch, model_path), model_path)
        complete_from_signature(config, inputs, outputs, default_max_batch_size(cls.name, options))

    def __init__(self, context: InstanceContext) -> None:
        torch = _import_torch()
        self._torch = torch
        config = context.config
        self._model = config.name
        if context.device_kind == "gpu":
            if not torch.cuda.is_available():
                raise ModelConfigError(
                    f"model '{config.name}' asks for a GPU instance, but this PyTorch has no CUDA device "
                    f"(torch {torch.__version__}); use a CUDA build of torch or instance_group kind KIND_CPU"
                )
            self._device = torch.device("cuda", context.device_id)
        else:
            self._device = torch.device("cpu")
        self._inference_mode = self._flag(context, "INFERENCE_MODE", default=True)
        self._optimized = not self._flag(context, "DISABLE_OPTIMIZED_EXECUTION", default=False)
        self._set_threads(context)
        for library in context.op_libraries():  # model_operations: TORCH_LIBRARY ops the model calls
            try:
                torch.ops.load_library(str(library))
            except OSError as exc:
                raise ModelConfigError(
                    f"model '{config.name}': cannot load op library {library}: {exc}"
                ) from None
        path = context.model_path
        if not path.is_file():
            raise ModelConfigError(f"model '{config.name}': model file {path} does not exist")
        self._scripted = path.suffix != ".pt2"
        declared = None
        try:
            if self._scripted:
                module = torch.jit.load(str(path), map_location=self._device)
                arguments = [a.name for a in module.forward.schema.arguments[1:]]
            else:
                program = torch.export.load(str(path))
                arguments = list(program.graph_signature.user_inputs)
                declared = _program_signature(torch, program, path)
                if self._device.type != "cpu":
                    program = torch.export.passes.move_to_device_pass(program, self._device)
                module = program.module()
        except Exception as exc:  # noqa: BLE001  (any load failure marks the model unavailable)
            raise ModelConfigError(f"{path}: PyTorch cannot load the model: {exc}") from None
        if self._scripted:
            module.eval()
        self._module = module
        self._output_types = _config_types(torch)
        input_names = [tensor.name for tensor in config.input]
        order = _index_order(input_names)
        if order is not None:
            self._input_order = [name for _, name in sorted(zip(order, input_names, strict=True))]
        elif sorted(input_names) == sorted(arguments):
            self._input_order = arguments
        else:
            self._input_order = input_names
        output_names = [tensor.name for tensor in config.output]
        indices = _index_order(output_names)
        self._output_index = dict(
            zip(output_names, indices if indices is not None else range(len(output_names)), strict=True)
        )
        self._output_config = {tensor.name: tensor.data_type for tensor in config.output}
        self._check_signature(config, arguments, declared)
        log.info(
            "model %s: %s on %s, inputs passed as %s",
            config.name,
            "TorchScript" if self._scripted else "torch.export program",
            self._device,
            self._input_order,
        )

    def _check_signature(
        self,
        config: model_config_pb2.ModelConfig,
        arguments: Sequence[str],
        declared: tuple[list[tuple[str, int, list[int]]], list[tuple[str, int, list[int]]]] | None,
    ) -> None:
        """The configuration against the model, at load: a mismatch never reaches a request.

        TorchScript declares only its ``forward`` arguments: their number is checked, in the words of
        Triton's PyTorch backend. A ``torch.export`` program declares datatypes and shapes too: each config
        tensor is checked against the program's tensor it is passed as (by this backend's name rules).
        """
        if declared is None:
            expected = expected_input_count(config)
            if len(arguments) != expected:
                raise ModelConfigError(
                    f"unable to load model '{config.name}', configuration expects {expected} inputs, model "
                    f"provides {len(arguments)}"
                )
            return
        inputs, outputs = declared
        # The program's i-th argument is fed the config input passed i-th.
        names = [*self._input_order, *arguments[len(self._input_order) :]]
        by_index = {index: name for name, index in self._output_index.items()}
        check_config(
            config,
            ModelSignature(
                [TensorInfo(name, t, tuple(d)) for name, (_, t, d) in zip(names, inputs, strict=False)],
                [
                    TensorInfo(by_index.get(index, f"OUTPUT__{index}"), data_type, tuple(dims))
                    for index, (_, data_type, dims) in enumerate(outputs)
                ],
            ),
        )

    @staticmethod
    def _flag(context: InstanceContext, key: str, *, default: bool) -> bool:
        value = context.parameter(key) or context.parameter(key.lower())
        if value is None:
            return default
        if value.lower() not in {"true", "false", "1", "0"}:
            raise ModelConfigError(
                f"model '{context.config.name}': parameter {key} is '{value}', expected true or false"
            )
        return value.lower() in {"true", "1"}

    def _set_threads(self, context: InstanceContext) -> None:
        torch = self._torch
        for key, setter in (
            ("INTRA_OP_THREAD_COUNT", torch.set_num_threads),
            ("INTER_OP_THREAD_COUNT", torch.set_num_interop_threads),
        ):
            value = context.parameter(key) or context.parameter(key.lower())
            if not value:
                continue
            if not value.isdigit() or int(value) < 1:
                raise ModelConfigError(
                    f"model '{context.config.name}': parameter {key} is '{value}', expected a positive integer"
                )
            try:
                setter(int(value))
            except RuntimeError as exc:  # inter-op threads are fixed once PyTorch has run parallel work
                log.warning("model %s: %s=%s not applied: %s", context.config.name, key, value, exc)

    def _to_torch(self, array: npt.NDArray[Any]) -> Any:
        torch = self._torch
        if array.dtype == ml_dtypes.bfloat16:
            tensor = torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
        else:
            # torch.from_numpy shares memory and warns on read-only arrays (request bytes are).
            tensor = torch.from_numpy(array if array.flags.writeable else array.copy())
        return tensor.to(self._device) if self._device.type != "cpu" else tensor

    def _to_numpy(self, name: str, value: object) -> npt.NDArray[Any]:
        torch = self._torch
        if not isinstance(value, torch.Tensor):
            raise InternalError(
                f"model '{self._model}' output '{name}' is a {type(value).__name__}, expected a tensor"
            )
        declared = self._output_config[name]
        produced = self._output_types.get(value.dtype)
        if produced != declared:
            raise InternalError(
                f"model '{self._model}' output '{name}' has dtype {value.dtype}, but the config declares "
                f"{model_config_pb2.DataType.Name(declared)}"
            )
        tensor = value.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            return np.asarray(tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16))
        return np.asarray(tensor.numpy())

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        torch = self._torch
        args = [self._to_torch(inputs[name]) for name in self._input_order]
        optimized = torch.jit.optimized_execution(False) if not self._optimized else contextlib.nullcontext()
        try:
            with torch.inference_mode(self._inference_mode), optimized:
                result = self._module(*args)
        except Exception as exc:  # noqa: BLE001  (fails this batch only)
            raise InternalError(f"model '{self._model}': PyTorch execution failed: {exc}") from None
        if isinstance(result, Mapping):
            missing = [name for name in output_names if name not in result]
            if missing:
                raise InternalError(f"model '{self._model}' returned a dict without {missing}")
            return {name: self._to_numpy(name, result[name]) for name in output_names}
        results = list(result) if isinstance(result, list | tuple) else [result]
        outputs = {}
        for name in output_names:
            index = self._output_index[name]
            if index >= len(results):
                raise InternalError(
                    f"model '{self._model}' returned {len(results)} outputs; output '{name}' is number {index}"
                )
            outputs[name] = self._to_numpy(name, results[index])
        return outputs
