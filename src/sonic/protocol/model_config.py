"""Model configuration: parse ``config.pbtxt`` into Triton's ``ModelConfig`` and check it.

Parsing uses ``google.protobuf.text_format`` on the generated ``model_config_pb2.ModelConfig``
that ships with tritonclient, so every field Triton knows is accepted and kept (the
``model_repository_agents`` checksums SonicTriton compares come back unchanged).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError, ModelConfigError

ModelConfig = model_config_pb2.ModelConfig

CONFIG_FILENAME = "config.pbtxt"

# Triton platform names and the backend that serves each.
PLATFORM_TO_BACKEND = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "ensemble": "ensemble",
    "tensorflow_graphdef": "tensorflow_graphdef",
    "tensorflow_savedmodel": "tensorflow_savedmodel",
}
# The platform Triton writes into a loaded config for a backend named without one.
BACKEND_TO_PLATFORM = {"onnxruntime": "onnxruntime_onnx", "pytorch": "pytorch_libtorch"}
# The backend Triton writes into a loaded config for a platform named without one: both TensorFlow
# platforms run on its one ``tensorflow`` backend (which also decides their default instance count).
# PLATFORM_TO_BACKEND above picks our class instead: the TensorFlow platforms differ in file layout.
PLATFORM_TO_TRITON_BACKEND = {
    **PLATFORM_TO_BACKEND,
    "tensorflow_graphdef": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
}


_GROUP_KIND = model_config_pb2.ModelInstanceGroup

# Config sections sonic does not implement, one line each. Triton acts on them, so a model that sets
# one would be served with other answers than Triton's: its load is refused, naming the section.
UNIMPLEMENTED_SECTIONS: dict[str, Callable[[model_config_pb2.ModelConfig], bool]] = {
    "instance_group.secondary_devices": lambda c: any(g.secondary_devices for g in c.instance_group),
    # Iterative sequences need request rescheduling (a Python model's ``set_release_flags``), which sonic lacks.
    "sequence_batching.iterative_sequence": lambda c: c.sequence_batching.iterative_sequence,
}


class VersionConfigError(ModelConfigError):
    """A configuration Triton 2.51 takes while it polls the repository but refuses when it loads a
    version (a tensor without a name, a data type or valid dims; an instance group it cannot place):
    answered as each version's failure (``load failed for model ...: version N is at UNAVAILABLE
    state: Invalid argument: ...``), where the others are the poll's."""


class ModelCodeError(ModelConfigError):
    """The model's own code failed while it loaded (a Python model's import, its class, its
    ``auto_complete_config`` or ``initialize``): Triton's Python backend answers it ``Internal``."""


def refuse_unimplemented(config: model_config_pb2.ModelConfig) -> None:
    """Raise for the first section of :data:`UNIMPLEMENTED_SECTIONS` the config sets."""
    for section, is_set in UNIMPLEMENTED_SECTIONS.items():
        if is_set(config):
            raise ModelConfigError(
                f"model '{config.name}': the configuration sets '{section}', which sonic does not implement "
                "(Triton would act on it, so the model is not served without it)"
            )


def parse_config_text(text: str, source: str) -> model_config_pb2.ModelConfig:
    """Parse config text; errors name ``source`` with line and column."""
    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        where = f"{source}:{line}:{column}" if line else source
        raise ModelConfigError(f"{where}: cannot parse model configuration: {exc}") from None
    return config


def load_config_file(path: Path) -> model_config_pb2.ModelConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read model configuration: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ModelConfigError(f"{path}: model configuration is not UTF-8 text: {exc}") from None
    return parse_config_text(text, str(path))


def parse_config_json(text: str, source: str) -> model_config_pb2.ModelConfig:
    """The JSON form (RepositoryModelLoad's ``config`` parameter, Triton's HTTP config)."""
    config = model_config_pb2.ModelConfig()
    try:
        json_format.Parse(text, config)
    except json_format.ParseError as exc:
        raise ModelConfigError(f"{source}: cannot parse model configuration JSON: {exc}") from None
    return config


def backend_name(config: model_config_pb2.ModelConfig) -> str:
    """The backend a config asks for: ``backend`` wins, else the one mapped from ``platform``."""
    if config.backend:
        return str(config.backend)
    if config.platform:
        if config.platform not in PLATFORM_TO_BACKEND:
            raise ModelConfigError(
                f"model '{config.name}': unknown platform '{config.platform}', "
                f"expected one of {', '.join(sorted(PLATFORM_TO_BACKEND))}"
            )
        return PLATFORM_TO_BACKEND[config.platform]
    return ""


@dataclass(frozen=True)
class TensorSpec:
    """An input or output as the client sees it (dims without the batch dimension)."""

    name: str
    datatype: dtypes.Datatype
    dims: tuple[int, ...]
    model_dims: tuple[int, ...]  # after ``reshape``: the shape the model itself takes, per sample
    optional: bool = False

    @property
    def has_variable_dims(self) -> bool:
        return any(d < 0 for d in self.dims)

    def client_shape(self, model_shape: tuple[int, ...], batched: bool) -> tuple[int, ...]:
        """An output's shape as the client sees it, from the shape the model gave (Triton's rule for
        ``reshape``: the configured ``dims``, each ``-1`` filled in order with the sizes the model gave where
        ``reshape`` has ``-1``)."""
        if self.model_dims == self.dims:
            return model_shape
        lead = model_shape[:1] if batched else ()
        sample = model_shape[len(lead) :]
        sizes = iter([size for size, dim in zip(sample, self.model_dims, strict=False) if dim < 0])
        return lead + tuple(next(sizes, -1) if dim < 0 else dim for dim in self.dims)


def _tensor_spec(
    model: str, kind: str, tensor: model_config_pb2.ModelInput | model_config_pb2.ModelOutput
) -> TensorSpec:
    # Triton's words (its ValidateIOShape / ValidateModelInput, answered when a version loads).
    if not tensor.name:
        raise VersionConfigError(f"model {kind} must specify 'name' for {model}")
    if tensor.data_type == model_config_pb2.TYPE_INVALID:
        raise VersionConfigError(f"model {kind} '{tensor.name}' must specify 'data_type' for {model}")
    try:
        datatype = dtypes.from_config_enum(tensor.data_type)
    except InvalidArgumentError as exc:
        raise ModelConfigError(f"model '{model}': {kind} '{tensor.name}': {exc}") from None
    dims = tuple(int(d) for d in tensor.dims)
    if any(d == 0 or d < -1 for d in dims):
        raise VersionConfigError(
            f"model {kind} '{tensor.name}' dimension must be integer >= 1, or -1 to indicate a "
            f"variable-size dimension for {model}"
        )
    model_dims = dims
    if tensor.HasField("reshape"):
        model_dims = tuple(int(d) for d in tensor.reshape.shape)
        _check_reshape(model, kind, tensor.name, dims, model_dims)
    optional = bool(getattr(tensor, "optional", False))
    return TensorSpec(tensor.name, datatype, dims, model_dims, optional)


def _element_count(dims: tuple[int, ...]) -> int:
    """Triton's GetElementCount: -1 with a variable dim, 0 for no dims."""
    return -1 if -1 in dims else math.prod(dims) if dims else 0


def _trunks(dims: tuple[int, ...]) -> list[int]:
    """The element counts of the runs of fixed dims between (and around) the variable ones."""
    counts, current = [], 1
    for dim in dims:
        if dim == -1:
            counts.append(current)
            current = 1
        else:
            current *= dim
    return [*counts, current]


def _check_reshape(model: str, kind: str, name: str, dims: tuple[int, ...], shape: tuple[int, ...]) -> None:
    """Triton's ValidateIOShape of a ``reshape``: its dims valid, as many elements as ``dims`` (a ``[ ]``
    reshape of ``[1]`` too), each run of fixed dims between variable ones as many."""
    where = f"model {kind} '{name}'"
    if any(d < 1 and d != -1 for d in shape):
        raise VersionConfigError(
            f"{where} reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension "
            f"for {model}"
        )
    size, reshaped = _element_count(dims), _element_count(shape)
    if size != reshaped and (reshaped != 0 or size != 1):
        raise VersionConfigError(f"{where} has different size for dims and reshape for {model}")
    if size == -1:
        trunks, reshaped_trunks = _trunks(dims), _trunks(shape)
        if len(trunks) != len(reshaped_trunks):
            raise VersionConfigError(
                f"{where} has different number of variable-size dimensions for dims and reshape for {model}"
            )
        if trunks != reshaped_trunks:
            raise VersionConfigError(f"{where} has different size for dims and reshape for {model}")


@dataclass(frozen=True)
class ModelSpec:
    """What request validation and batching need from a config, computed once per load."""

    name: str
    max_batch_size: int
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0


def validate_config(config: model_config_pb2.ModelConfig) -> ModelSpec:
    """Check a complete config for consistency; return the spec used at request time."""
    name = config.name
    refuse_unimplemented(config)
    if config.max_batch_size < 0:
        raise ModelConfigError(f"model '{name}': max_batch_size must be >= 0, got {config.max_batch_size}")
    # No input or no output is a valid model, as in Triton 2.51 (e.g. a Python model loaded with the
    # override {"max_batch_size": 16}: requests naming any tensor are then refused, one by one).
    inputs: dict[str, TensorSpec] = {}
    for tensor in config.input:
        if tensor.name in inputs:
            raise ModelConfigError(f"model '{name}': input '{tensor.name}' is declared twice")
        inputs[tensor.name] = _tensor_spec(name, "input", tensor)
    outputs: dict[str, TensorSpec] = {}
    for tensor in config.output:
        if tensor.name in outputs:
            raise ModelConfigError(f"model '{name}': output '{tensor.name}' is declared twice")
        outputs[tensor.name] = _tensor_spec(name, "output", tensor)
    if config.HasField("dynamic_batching"):
        batching = config.dynamic_batching
        if config.max_batch_size == 0:
            raise ModelConfigError(
                f"model '{name}': dynamic_batching needs max_batch_size > 0 (the model has max_batch_size 0)"
            )
        for size in batching.preferred_batch_size:
            if not 0 < size <= config.max_batch_size:
                raise ModelConfigError(
                    f"model '{name}': preferred_batch_size {size} must be in 1..max_batch_size "
                    f"({config.max_batch_size})"
                )
        levels = batching.priority_levels
        if levels and not 0 < batching.default_priority_level <= levels:
            raise ModelConfigError(
                f"model '{name}': default_priority_level {batching.default_priority_level} must be in "
                f"1..priority_levels ({levels})"
            )
        for level in batching.priority_queue_policy:
            if not 0 < level <= levels:
                raise ModelConfigError(
                    f"model '{name}': priority_queue_policy for level {level}, but priority_levels is {levels}"
                )
    for group in config.instance_group:
        if group.count < 0:
            raise ModelConfigError(f"model '{name}': instance_group count must be >= 0, got {group.count}")
    return ModelSpec(name, int(config.max_batch_size), inputs, outputs)


DEFAULT_CPU_COUNT_BACKENDS = ("onnxruntime", "tensorflow")  # Triton's SetDefaultInstanceCount opt-ins


def _default_count(backend: str, kind: int) -> int:
    """Triton's: one instance per group, two for onnxruntime and TensorFlow CPU groups."""
    return 2 if kind == _GROUP_KIND.KIND_CPU and backend in DEFAULT_CPU_COUNT_BACKENDS else 1


def fill_defaults(config: model_config_pb2.ModelConfig, *, default_filename: str, gpu_count: int) -> None:
    """Fill what Triton fills in when it loads a model, so ModelConfig answers look the same."""
    if config.backend in BACKEND_TO_PLATFORM and not config.platform:
        config.platform = BACKEND_TO_PLATFORM[config.backend]
    if config.platform in PLATFORM_TO_TRITON_BACKEND and not config.backend and config.platform != "ensemble":
        config.backend = PLATFORM_TO_TRITON_BACKEND[config.platform]
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if not config.instance_group:  # Triton's own group is named after the model, with no index
        config.instance_group.add(name=config.name, kind=_GROUP_KIND.KIND_AUTO)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == _GROUP_KIND.KIND_AUTO:
            group.kind = _GROUP_KIND.KIND_GPU if gpu_count else _GROUP_KIND.KIND_CPU
        if group.count == 0:
            group.count = _default_count(config.backend, group.kind)
        if group.kind == _GROUP_KIND.KIND_GPU:
            _check_gpus(config.name, group, gpu_count)
            if not group.gpus:
                group.gpus.extend(range(gpu_count))
    if not config.default_model_filename:
        config.default_model_filename = default_filename
    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True
    # Triton's default: one preferred size, the largest batch (the batcher's behaviour stays the same).
    batching = config.dynamic_batching
    if (
        config.HasField("dynamic_batching")
        and not batching.preferred_batch_size
        and config.max_batch_size > 0
    ):
        batching.preferred_batch_size.append(config.max_batch_size)


def _check_gpus(model: str, group: model_config_pb2.ModelInstanceGroup, gpu_count: int) -> None:
    """Triton refuses a GPU group it cannot place (sonic would otherwise hang every request on it)."""
    if not gpu_count:
        raise VersionConfigError(
            f"instance group {group.name} of model {model} has kind KIND_GPU but no GPUs are available"
        )
    for gpu in group.gpus:
        if not 0 <= gpu < gpu_count:
            raise VersionConfigError(
                f"instance group {group.name} of model {model} specifies invalid or unsupported gpu id "
                f"{gpu}; the GPUs available are 0..{gpu_count - 1}"
            )


# Triton's core gives every backend ``default-max-batch-size`` 4 unless --backend-config sets it: the
# max_batch_size its onnxruntime and TensorFlow backends complete for a model that can batch.
DEFAULT_MAX_BATCH_SIZE = 4
DEFAULT_MAX_BATCH_SIZE_SETTING = "default-max-batch-size"
# std::stoi, which Triton's backends read settings with: leading whitespace, a sign, digits, the rest ignored.
_STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_INT_MAX = 2**31 - 1


def default_max_batch_size(backend: str, options: Mapping[str, str]) -> int:
    """``default-max-batch-size`` of a backend's ``--backend-config`` settings, read as Triton's
    backends read it (``ParseIntValue``); InvalidArgumentError in its words, then which setting."""
    value = options.get(DEFAULT_MAX_BATCH_SIZE_SETTING)
    if value is None:
        return DEFAULT_MAX_BATCH_SIZE
    match = _STOI.match(value)
    if match is None or not -_INT_MAX - 1 <= int(match.group(1)) <= _INT_MAX:
        raise InvalidArgumentError(
            f"failed to convert '{value}' to integral number (--backend-config "
            f"{DEFAULT_MAX_BATCH_SIZE_SETTING} of backend '{backend}': expected a 32-bit integer)"
        )
    return int(match.group(1))


Signature = list[tuple[str, int, list[int]]]  # (name, config data type enum, dims with -1 for dynamic)


def complete_from_signature(
    config: model_config_pb2.ModelConfig,
    inputs: Signature,
    outputs: Signature,
    default_max_batch_size: int,
) -> None:
    """Fill missing inputs/outputs, and ``max_batch_size``, as Triton's onnxruntime backend
    (``AutoCompleteMaxBatch``): a model whose every input and output has a dynamic first dimension
    can batch, and one with no ``max_batch_size`` gets ``default_max_batch_size`` (0 or less: none);
    a ``max_batch_size`` above 1 with no scheduler adds ``dynamic_batching``."""
    if all(dims and dims[0] == -1 for _, _, dims in inputs + outputs):
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 0)
        if config.max_batch_size > 1 and not config.HasField("sequence_batching"):
            config.dynamic_batching.SetInParent()  # no change where the config has one
    elif config.max_batch_size != 0:
        raise ModelConfigError(
            f"autofill failed for model '{config.name}': model does not support batching while non-zero "
            "max_batch_size is specified"
        )
    strip = 1 if config.max_batch_size > 0 else 0
    if not config.input:
        for name, data_type, dims in inputs:
            config.input.add(name=name, data_type=data_type, dims=dims[strip:])
    if not config.output:
        for name, data_type, dims in outputs:
            config.output.add(name=name, data_type=data_type, dims=dims[strip:])
