"""Python backend: Triton Python-backend models (``model.py`` with ``TritonPythonModel``), unchanged.

The model runs in the server process, in its instance's own thread: request tensors reach
``execute`` as the server's numpy arrays, with none of the shared-memory copies of Triton's
stub process. ``execute`` gets the requests of a dynamic batch as a list, as in Triton, and
answers each with its own ``InferenceResponse`` (an error in one fails only that request).

Each instance loads its own copy of ``model.py`` (its module-level state is per instance, as with
Triton's one process per instance). ``auto_complete_config`` runs on a separate copy at load time.
Decoupled models (``model_transaction_policy { decoupled: true }``) answer through each request's
response sender (:mod:`.pb_decoupled`), from ``execute`` or later from threads of their own, and
``execute`` returns None, as in Triton.
Not supported: ``EXECUTION_ENV_PATH`` environments (install the model's dependencies into the
server's environment), imports of sibling files relative to ``model.py``, response senders for
non-decoupled models.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import logging
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from google.protobuf import descriptor, json_format
from tritonclient.grpc import model_config_pb2

from sonic.protocol import dtypes
from sonic.protocol.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    ModelConfigError,
    NotFoundError,
    SonicError,
    UnavailableError,
    UnimplementedError,
)
from sonic.protocol.model_config import ModelCodeError, ModelSpec
from sonic.protocol.types import custom_parameters
from sonic.server.backends import pb_config, pb_decoupled, pb_metrics, pb_utils
from sonic.server.backends.base import InstanceContext, Request, RequestBackend

log = logging.getLogger(__name__)

_INT64_TYPES = {
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64,
    descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64,
}

_ERROR_CODES: dict[int, type[SonicError]] = {
    pb_utils.TritonError.INVALID_ARG: InvalidArgumentError,
    pb_utils.TritonError.NOT_FOUND: NotFoundError,
    pb_utils.TritonError.UNAVAILABLE: UnavailableError,
    pb_utils.TritonError.UNSUPPORTED: UnimplementedError,
    pb_utils.TritonError.ALREADY_EXISTS: AlreadyExistsError,
    pb_utils.TritonError.CANCELLED: UnavailableError,
}


def _ints_as_numbers(message: descriptor.Descriptor, value: dict[str, Any]) -> None:
    """Protobuf JSON writes 64-bit integers as strings; Triton's model JSON has numbers (dims: [4])."""
    for field in message.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                if value_field.message_type is not None:
                    for entry in item.values():
                        _ints_as_numbers(value_field.message_type, entry)
                continue
            for entry in item if isinstance(item, list) else [item]:
                _ints_as_numbers(field.message_type, entry)
        elif field.type in _INT64_TYPES:
            value[field.name] = [int(v) for v in item] if isinstance(item, list) else int(item)


def config_to_dict(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """The model config as Triton gives it to Python models: every field, names as in config.pbtxt."""
    result = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _ints_as_numbers(config.DESCRIPTOR, result)
    return result


def _triton_request_fields(parameters: Mapping[str, object]) -> dict[str, Any]:
    """What Triton's Python backend makes of the request parameters: the sequence's correlation id and
    start/end flags, the timeout, and only the custom parameters as ``request.parameters()``."""
    if not parameters:
        return {}
    flags = 0
    if parameters.get("sequence_start"):
        flags |= pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
    if parameters.get("sequence_end"):
        flags |= pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
    return {
        "correlation_id": parameters.get("sequence_id", 0),
        "flags": flags,
        "timeout": parameters.get("timeout", 0),
        "parameters": custom_parameters(parameters),
    }


def _module_name(model_path: Path, tag: str) -> str:
    return "_sonic_python_model_" + re.sub(r"\W", "_", f"{model_path.parent.parent.name}_{tag}")


def _load_module(model_path: Path, tag: str) -> ModuleType:
    """Execute ``model.py`` as a fresh module, registered in ``sys.modules`` until :func:`_unload`.

    Registration lets dataclasses, pickling and typing inside model.py find their own module.
    """
    if not model_path.is_file():
        raise ModelConfigError(f"{model_path}: no such Python model file")
    name = _module_name(model_path, tag)
    spec = importlib.util.spec_from_file_location(name, model_path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001  (any error in user code fails the load)
        sys.modules.pop(name, None)
        raise ModelCodeError(
            f"{_failed(exc)}\n\nAt:\n  {_shown(model_path)}: importing the model\n"
        ) from None
    return module


def _shown(model_path: Path) -> str:
    """The model file as a client may see it: inside the repository (``<model>/<version>/model.py``), not
    the server's own path."""
    return "/".join(model_path.parts[-3:])


def _failed(exc: Exception) -> str:
    """An exception of the model's code as Triton's Python stub words it (its traceback, which discloses
    the server's paths, is left out: sonic says where after ``At:``)."""
    return f"{type(exc).__name__}: {exc}"


def _unload(module: ModuleType) -> None:
    sys.modules.pop(module.__name__, None)


def _model_class(module: ModuleType, model_path: Path) -> type[Any]:
    cls = getattr(module, "TritonPythonModel", None)
    if not isinstance(cls, type):
        # Triton's stub imports model.py as module '<version>.model'
        raise ModelCodeError(
            f"AttributeError: module '{model_path.parent.name}.model' has no attribute 'TritonPythonModel'"
            f"\n\nAt:\n  {_shown(model_path)}: defines no class TritonPythonModel\n"
        )
    return cls


def _check_supported(config: model_config_pb2.ModelConfig) -> None:
    if "EXECUTION_ENV_PATH" in config.parameters:
        log.warning(
            "model '%s': EXECUTION_ENV_PATH is ignored: sonic runs Python models in the server's own "
            "environment, so install the model's dependencies there",
            config.name,
        )


class PythonBackend(RequestBackend):
    name: ClassVar[str] = "python"
    default_filename: ClassVar[str] = "model.py"
    supports_decoupled: ClassVar[bool] = True

    @classmethod
    def auto_complete_config(cls, config: model_config_pb2.ModelConfig, model_path: Path) -> None:
        _check_supported(config)
        module = _load_module(model_path, "auto_complete")
        try:
            hook = getattr(_model_class(module, model_path), "auto_complete_config", None)
            if hook is None:
                return
            result = hook(pb_config.ModelConfig(config_to_dict(config)))
        except SonicError:
            raise
        except Exception as exc:  # noqa: BLE001  (user code)
            raise ModelCodeError(
                f"{_failed(exc)}\n\nAt:\n  model '{config.name}': auto_complete_config\n"
            ) from None
        finally:
            _unload(module)
        if not isinstance(result, pb_config.ModelConfig):
            raise ModelConfigError(
                f"model '{config.name}': auto_complete_config must return its ModelConfig argument, "
                f"got {type(result).__name__}"
            )
        completed = model_config_pb2.ModelConfig()
        try:
            json_format.ParseDict(result.as_dict(), completed)
        except json_format.ParseError as exc:
            raise ModelConfigError(
                f"model '{config.name}': auto_complete_config produced an invalid config: {exc}"
            ) from None
        config.CopyFrom(completed)

    def __init__(self, context: InstanceContext) -> None:
        config = context.config
        _check_supported(config)
        self._model_name = config.name
        self._instance_name = context.instance_name
        self._decoupled = bool(config.model_transaction_policy.decoupled)
        self._spec: ModelSpec = context.spec
        # Implicit state (sequence_batching.state): the model returns each state's output_name with its
        # outputs; the sequence batcher keeps it for the sequence's next request.
        self._declared = {name: spec.datatype for name, spec in self._spec.outputs.items()} | {
            state.output_name: dtypes.from_config_enum(state.data_type)
            for state in config.sequence_batching.state
        }
        pb_utils.current_caller.set(context.models)
        registry = context.custom_metrics
        self._metrics = pb_metrics.MetricsScope(registry) if registry is not None else None
        pb_metrics.current_metrics.set(self._metrics)
        self._loop: asyncio.AbstractEventLoop | None = None  # for ``async def execute`` models
        self._module = _load_module(context.model_path, f"{context.version}_{context.instance_name}")
        try:
            self._model = _model_class(self._module, context.model_path)()
            initialize = getattr(self._model, "initialize", None)
            if initialize is not None:
                args = {
                    "model_config": json.dumps(config_to_dict(config)),
                    "model_instance_kind": context.device_kind.upper(),
                    "model_instance_name": context.instance_name,
                    "model_instance_device_id": str(context.device_id),
                    "model_repository": str(context.version_dir.parent),
                    "model_version": str(context.version),
                    "model_name": config.name,
                }
                try:
                    initialize(args)
                except Exception as exc:  # noqa: BLE001  (user code)
                    raise ModelCodeError(
                        f"{_failed(exc)}\n\nAt:\n  model '{config.name}' instance {context.instance_name}: "
                        "initialize\n"
                    ) from None
        except BaseException:
            _unload(self._module)
            raise

    def execute_requests(self, requests: Sequence[Request]) -> list[dict[str, npt.NDArray[Any]] | Exception]:
        pb_requests = [
            pb_utils.InferenceRequest(
                self._model_name,
                [pb_utils.Tensor(name, array) for name, array in request.inputs.items()],
                list(request.output_names),
                request_id=request.request_id,
                trace=None if request.trace is None else pb_utils.InferenceTrace(request.trace),
                **_triton_request_fields(request.parameters),
            )
            for request in requests
        ]
        for request, pb_request in zip(requests, pb_requests, strict=True):
            if request.responses is not None:
                pb_decoupled.attach_sender(
                    pb_request, request.responses, self._outputs, f"model '{self._model_name}'"
                )
        if self._decoupled:
            return self._execute_decoupled(requests, pb_requests)
        try:
            responses = self._run_execute(pb_requests)
        except pb_utils.TritonModelException as exc:
            raise InternalError(f"model '{self._model_name}': {exc.message()}") from None
        except Exception as exc:  # noqa: BLE001  (user code fails this batch only)
            raise InternalError(f"model '{self._model_name}': execute failed: {exc!r}") from None
        if not isinstance(responses, list | tuple) or len(responses) != len(requests):
            got = f"{len(responses)} responses" if isinstance(responses, list | tuple) else repr(responses)
            raise InternalError(
                f"model '{self._model_name}': execute must return one response per request "
                f"({len(requests)}), got {got}"
            )
        return [self._outputs(response) for response in responses]

    def _run_execute(self, pb_requests: list[pb_utils.InferenceRequest]) -> object:
        result = self._model.execute(pb_requests)
        if inspect.iscoroutine(result):
            # Triton runs ``async def execute`` on an event loop of the stub; this instance's
            # thread keeps one of its own (never the server's loop, which must not block).
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            result = self._loop.run_until_complete(result)
        return result

    def _execute_decoupled(
        self, requests: Sequence[Request], pb_requests: list[pb_utils.InferenceRequest]
    ) -> list[dict[str, npt.NDArray[Any]] | Exception]:
        """Responses went (or will go) through the senders; execute must return None. Errors in
        Triton's words (the model instance named as Triton names it), ending each request's stream
        now, before its request objects are released."""
        failed = f"Failed to process the request(s) for model '{self._instance_name}', message: "
        error: InternalError | None = None
        try:
            result = self._run_execute(pb_requests)
        except Exception as exc:  # noqa: BLE001  (user code fails this batch only)
            error = InternalError(f"{failed}{type(exc).__name__}: {exc}")
        else:
            if result is not None:
                error = InternalError(
                    f"{failed}Python model '{self._instance_name}' is using the decoupled mode and the "
                    "execute function must return None."
                )
        if error is None:
            return [{} for _ in requests]
        for request in requests:
            if request.responses is not None:
                request.responses.end_with(error)
        return [error for _ in requests]

    def _outputs(self, response: object) -> dict[str, npt.NDArray[Any]] | Exception:
        where = f"model '{self._model_name}'"
        if not isinstance(response, pb_utils.InferenceResponse):
            return InternalError(
                f"{where}: execute returned {type(response).__name__}, not InferenceResponse"
            )
        error = response.error()
        if error is not None:
            return _ERROR_CODES.get(error.code(), InternalError)(error.message())
        outputs: dict[str, npt.NDArray[Any]] = {}
        for tensor in response.output_tensors():
            name = tensor.name()
            datatype = self._declared.get(name)
            if datatype is None:
                return InternalError(
                    f"{where}: unexpected output '{name}', the config declares {sorted(self._declared)}"
                )
            array = tensor.as_numpy()
            if datatype.name == "BYTES":
                if array.dtype.kind not in "OS":
                    return InternalError(
                        f"{where}: output '{name}' is BYTES in the config, but the model gave numpy {array.dtype}"
                    )
                array = array.astype(np.object_, copy=False)
            elif array.dtype != datatype.numpy:
                return InternalError(
                    f"{where}: output '{name}' has numpy dtype {array.dtype}, but the config declares "
                    f"{datatype.name} ({datatype.numpy})"
                )
            outputs[name] = array
        return outputs

    def close(self) -> None:
        try:
            finalize = getattr(self._model, "finalize", None)
            if finalize is not None:
                finalize()
        finally:
            if self._metrics is not None:
                self._metrics.close()  # the model's custom metrics go with it
            if self._loop is not None:
                self._loop.run_until_complete(self._loop.shutdown_default_executor())
                self._loop.close()
            _unload(self._module)
