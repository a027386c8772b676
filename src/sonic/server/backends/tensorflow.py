"""TensorFlow backend (Triton's ``tensorflow_graphdef`` and ``tensorflow_savedmodel`` platforms).

Needs the ``tensorflow`` extra (``tensorflow-cpu``; the GPU build of ``tensorflow`` works the same).
Each instance imports its version's graph into its own ``tf.Graph`` and opens one session on it at
load; requests only run that session (one callable per set of fed and fetched tensors, made once).
The callables come from ``CallableOptions`` (``Session._make_callable_from_options``, as Keras' graph
mode uses): ``Session.make_callable`` with feeds falls back to ``Session.run`` and its Python feed
handling on every call, about 150 us more per call here.

Tensors are named as in Triton: a GraphDef's tensors by their node names (``output/BiasAdd`` means
the node's first output, ``output/BiasAdd:0``; ``name:1`` another output); a SavedModel's by the
keys of its ``serving_default`` signature in its ``serve`` graph (config parameters ``TF_SIGNATURE_DEF``
and ``TF_GRAPH_TAG`` pick others, as Triton's).

Custom operators: ``model_operations { op_library_filename }`` libraries are loaded first.
Variables: the operations a JSON file names (config parameter ``TF_INIT_OPS_FILE``, as Triton's) run once
at load.

Threads, from config ``parameters`` (Triton's names) or ``--backend-config tensorflow,KEY=VALUE``:
``TF_NUM_INTRA_THREADS`` / ``intra_op_thread_count`` and ``TF_NUM_INTER_THREADS`` /
``inter_op_thread_count`` (0: TensorFlow's default).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InternalError, InvalidArgumentError, ModelConfigError
from sonic.protocol.model_config import default_max_batch_size
from sonic.server.backends.base import Backend, InstanceContext
from sonic.server.backends.signature import ModelSignature, TensorInfo, check_config

# TensorFlow dtype names to Triton config enums (what a SavedModel signature can declare).
_CONFIG_TYPES = {
    "bool": model_config_pb2.TYPE_BOOL,
    "uint8": model_config_pb2.TYPE_UINT8,
    "uint16": model_config_pb2.TYPE_UINT16,
    "uint32": model_config_pb2.TYPE_UINT32,
    "uint64": model_config_pb2.TYPE_UINT64,
    "int8": model_config_pb2.TYPE_INT8,
    "int16": model_config_pb2.TYPE_INT16,
    "int32": model_config_pb2.TYPE_INT32,
    "int64": model_config_pb2.TYPE_INT64,
    "float16": model_config_pb2.TYPE_FP16,
    "float32": model_config_pb2.TYPE_FP32,
    "float64": model_config_pb2.TYPE_FP64,
    "bfloat16": model_config_pb2.TYPE_BF16,
    "string": model_config_pb2.TYPE_STRING,
}


def _tensor_info(name: str, info: Any) -> TensorInfo:
    """A signature entry; no shape, or rank 0, leaves the shape to the configuration (as Triton)."""
    shape = info.tensor_shape
    dims = None if shape.unknown_rank or not shape.dim else tuple(int(d.size) for d in shape.dim)
    data_type = _CONFIG_TYPES.get(tf.dtypes.as_dtype(info.dtype).name, model_config_pb2.TYPE_INVALID)
    return TensorInfo(name, data_type, dims)


def _init_ops(context: InstanceContext) -> list[str]:
    """The operations of the JSON file config parameter ``TF_INIT_OPS_FILE`` names (``{"init_ops": [...]}``),
    as Triton's: in the version folder, else in the model's folder; none without the parameter."""
    name = context.parameter("TF_INIT_OPS_FILE")
    if not name:
        return []
    field = "parameters TF_INIT_OPS_FILE"
    path = context.version_file(field, name)
    if not path.is_file():
        path = context.files.path(field, name)
    try:
        ops = json.loads(path.read_text(encoding="utf-8"))["init_ops"]
    except OSError as exc:
        raise ModelConfigError(
            f"model '{context.config.name}': TF_INIT_OPS_FILE '{name}' is in neither the version folder nor "
            f"the model's folder ({exc.strerror})"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelConfigError(
            f"model '{context.config.name}': TF_INIT_OPS_FILE '{name}' must be JSON "
            f'{{"init_ops": ["<operation>", ...]}}: {exc!r}'
        ) from None
    if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
        raise ModelConfigError(
            f"model '{context.config.name}': TF_INIT_OPS_FILE '{name}': init_ops must be a list of operation names"
        )
    return ops


def _threads(context: InstanceContext, triton_name: str, alias: str) -> int:
    value = context.parameter(triton_name) or context.parameter(alias) or "0"
    if not value.isdigit():
        raise ModelConfigError(
            f"model '{context.config.name}': {triton_name} must be a whole number, got '{value}'"
        )
    return int(value)


class TensorFlowBackend(Backend):
    """``backend: "tensorflow"``: a GraphDef file or a SavedModel folder, whichever the version holds.

    Every variant is named ``tensorflow``, so ``--backend-config tensorflow,...`` reaches them all.
    """

    name: ClassVar[str] = "tensorflow"
    default_filename: ClassVar[str] = "model.graphdef"

    def __init__(self, context: InstanceContext) -> None:
        # Triton's TensorFlow backend reads default-max-batch-size when it starts, for every model: one it
        # cannot read fails the load (sonic completes no TensorFlow configuration, so it is read only here).
        default_max_batch_size(self.name, context.options)
        self._model = context.config.name
        self._config = context.config
        session_config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=_threads(context, "TF_NUM_INTRA_THREADS", "intra_op_thread_count"),
            inter_op_parallelism_threads=_threads(context, "TF_NUM_INTER_THREADS", "inter_op_thread_count"),
            allow_soft_placement=True,
        )
        if context.device_kind != "gpu":
            session_config.device_count["GPU"] = 0
        elif not tf.config.list_physical_devices("GPU"):
            raise ModelConfigError(
                f"model '{context.config.name}' asks for a GPU instance, but this TensorFlow sees no GPU "
                f"(tensorflow {tf.__version__}); install the GPU build or use instance_group kind KIND_CPU"
            )
        for library in context.op_libraries():  # model_operations: custom TensorFlow ops the graph uses
            try:
                tf.load_op_library(str(library))
            except Exception as exc:  # noqa: BLE001  (TensorFlow raises its own types)
                raise ModelConfigError(
                    f"model '{context.config.name}': TensorFlow cannot load op library {library}: {exc}"
                ) from None
        path = self._locate(context)
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph, config=session_config)
        self._names: dict[str, str] = {}  # config name -> graph tensor name (SavedModel signature keys)
        try:
            if path.is_dir():
                self._load_saved_model(
                    path,
                    context.parameter("TF_GRAPH_TAG") or "serve",
                    context.parameter("TF_SIGNATURE_DEF") or "serving_default",
                )
            else:
                graph_def = tf.compat.v1.GraphDef()
                graph_def.ParseFromString(path.read_bytes())
                # KIND_GPU: the instance's GPU for every node the graph does not pin itself.
                device = f"/device:GPU:{context.device_id}" if context.device_kind == "gpu" else None
                with self._graph.as_default(), self._graph.device(device):
                    tf.compat.v1.import_graph_def(graph_def, name="")
            init_ops = _init_ops(context)
            if init_ops:  # variables get their initial values once, before any request
                self._session.run([self._graph.get_operation_by_name(op) for op in init_ops])
        except (ModelConfigError, InvalidArgumentError):  # ours, already saying what is wrong
            self._session.close()
            raise
        except Exception as exc:  # noqa: BLE001  (TensorFlow raises many types for a bad model)
            self._session.close()
            raise ModelConfigError(f"{path}: TensorFlow cannot load the model: {exc}") from None
        self._callables: dict[tuple[tuple[str, ...], tuple[str, ...]], Any] = {}
        # Every tensor the config names must exist now, not at the first request.
        for tensor in [*context.config.input, *context.config.output]:
            self._tensor(tensor.name)

    @staticmethod
    def _locate(context: InstanceContext) -> Path:
        path = context.model_path
        if not path.exists() and context.config.platform == "tensorflow_savedmodel":
            default = TensorFlowSavedModelBackend.default_filename
            path = context.version_file("default_model_filename", default)
        if not path.exists():
            raise ModelConfigError(f"model '{context.config.name}': no model file or folder {path}")
        return path

    def _load_saved_model(self, path: Path, tag: str, signature_name: str) -> None:
        meta_graph = tf.compat.v1.saved_model.loader.load(self._session, [tag], str(path))
        if signature_name not in meta_graph.signature_def:
            raise ModelConfigError(
                f"{path}: no signature '{signature_name}', the model has {sorted(meta_graph.signature_def)}"
            )
        signature = meta_graph.signature_def[signature_name]
        for key, info in [*signature.inputs.items(), *signature.outputs.items()]:
            self._names[key] = info.name
        # As Triton's TensorFlow backend: the signature says exactly what the model takes and gives.
        declared = ModelSignature(
            [_tensor_info(key, info) for key, info in sorted(signature.inputs.items())],
            [_tensor_info(key, info) for key, info in sorted(signature.outputs.items())],
        )
        check_config(self._config, declared, names_first=True)

    def _tensor(self, name: str) -> tf.Tensor:
        graph_name = self._names.get(name, name)
        if ":" not in graph_name:
            graph_name += ":0"
        try:
            return self._graph.get_tensor_by_name(graph_name)
        except (KeyError, ValueError):
            raise ModelConfigError(f"model '{self._model}': the graph has no tensor '{name}'") from None

    def _callable(self, inputs: Mapping[str, Any], output_names: Sequence[str]) -> Any:
        options = config_pb2.CallableOptions()
        options.feed.extend(self._tensor(name).name for name in inputs)
        options.fetch.extend(self._tensor(name).name for name in output_names)
        return self._session._make_callable_from_options(options)

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        key = (tuple(inputs), tuple(output_names))
        run = self._callables.get(key)
        if run is None:
            run = self._callable(inputs, output_names)
            self._callables[key] = run
        try:
            results = run(*inputs.values())
        except Exception as exc:  # noqa: BLE001  (fails this batch only)
            raise InternalError(f"model '{self._model}': TensorFlow execution failed: {exc}") from None
        return {name: np.asarray(value) for name, value in zip(output_names, results, strict=True)}

    def close(self) -> None:
        self._session.close()


class TensorFlowGraphDefBackend(TensorFlowBackend):
    """``platform: "tensorflow_graphdef"``: a frozen GraphDef in ``model.graphdef``."""

    default_filename: ClassVar[str] = "model.graphdef"


class TensorFlowSavedModelBackend(TensorFlowBackend):
    """``platform: "tensorflow_savedmodel"``: a SavedModel folder ``model.savedmodel``."""

    default_filename: ClassVar[str] = "model.savedmodel"
