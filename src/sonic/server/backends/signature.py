"""A model file's own tensor signature, and the configuration checked against it when a model loads.

Triton's framework backends refuse a model whose ``config.pbtxt`` does not match the model (an output
it does not have, another datatype, another shape) when it loads, so a mistake in a configuration
never reaches a request: without the check, every request fails with the framework's raw text (an
onnxruntime ``Invalid output name`` as HTTP 500, which clients and Envoy retry elsewhere).
:func:`check_config` is that check, in the words of Triton's onnxruntime backend (``ValidateInputs``
/ ``ValidateOutputs``, with ``CheckAllowedModelInput`` and ``CompareDimsSupported`` of its utilities;
the TensorFlow backend's SavedModel check words it the same way):

- ``unable to load model 'm', configuration expects 2 inputs, model provides 1`` (the model's inputs
  against the configuration's, optional ones left out, with batch inputs, sequence controls and states);
- ``unexpected inference input 'x', allowed inputs are: a, b`` (and ``output``/``outputs``);
- ``unable to load model 'm', configuration expects datatype TYPE_FP32 for input 'x', model provides
  TYPE_INT64``;
- ``model 'm', tensor 'x': the model expects 2 dimensions (shape [-1,4]) but the model configuration
  specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed by the
  explicit tensor shape, making complete shape [-1,5])`` (a dimension the model leaves open, -1,
  matches any configured one for an input; an output's must be the same, as Triton compares them).

A backend builds a :class:`ModelSignature` from its model (ONNX session, SavedModel signature,
``torch.export`` program, tree model) and calls :func:`check_config` when an instance is created.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import ModelConfigError

WILDCARD = -1


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the model file declares it."""

    name: str
    data_type: int  # model_config_pb2.DataType
    dims: tuple[int, ...] | None  # with the batch dimension, -1 where open; None: the model does not say


@dataclass(frozen=True)
class ModelSignature:
    """What a model file declares."""

    inputs: Sequence[TensorInfo]
    outputs: Sequence[TensorInfo]
    # Inputs a request may feed though the model does not require them (ONNX overridable initializers).
    extra_inputs: Sequence[TensorInfo] = ()


def type_name(data_type: int) -> str:
    """Triton's ``TYPE_`` + ``TRITONSERVER_DataTypeString``: TYPE_STRING is BYTES there."""
    name = model_config_pb2.DataType.Name(data_type)
    return "TYPE_BYTES" if name == "TYPE_STRING" else name


def shape_text(dims: Sequence[int]) -> str:
    """Triton's ``ShapeToString``: ``[-1,4]``."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def expected_input_count(config: model_config_pb2.ModelConfig) -> int:
    """Triton's ``expected_input_cnt``: the config's required inputs, batch inputs, sequence controls, states."""
    count = sum(1 for tensor in config.input if not tensor.optional) + len(config.batch_input)
    if config.HasField("sequence_batching"):
        count += len(config.sequence_batching.control_input) + len(config.sequence_batching.state)
    return count


def check_config(
    config: model_config_pb2.ModelConfig, signature: ModelSignature, *, names_first: bool = False
) -> None:
    """Refuse (ModelConfigError) a configuration whose inputs or outputs the model does not have as declared.

    ``names_first``: the TensorFlow backend's order (input names, then their count), so an extra input
    is named; the onnxruntime backend counts first.
    """
    model = config.name
    inputs = {t.name: t for t in [*signature.inputs, *signature.extra_inputs]}
    if names_first:
        for tensor in config.input:
            _find(inputs, tensor.name, "input")
    expected = expected_input_count(config)
    if len(signature.inputs) != expected:
        raise ModelConfigError(
            f"unable to load model '{model}', configuration expects {expected} inputs, model provides "
            f"{len(signature.inputs)}"
        )
    batched = config.max_batch_size > 0
    for tensor in config.input:
        found = _find(inputs, tensor.name, "input")
        _check_type(model, "input", tensor, found)
        dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
        if found.dims is None:
            continue
        if tensor.allow_ragged_batch:
            if found.dims != (WILDCARD,):
                raise ModelConfigError(
                    f"unable to load model '{model}', configuration expects model provides input with "
                    f"shape [-1]  for ragged input '{tensor.name}', model provides {shape_text(found.dims)}"
                )
            continue
        _check_dims(model, tensor.name, found.dims, dims, batched=batched, exact=False)
    outputs = {t.name: t for t in signature.outputs}
    batch_outputs = {name for entry in config.batch_output for name in entry.target_name}
    for tensor in config.output:
        found = _find(outputs, tensor.name, "output")
        _check_type(model, "output", tensor, found)
        dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
        if found.dims is None or tensor.name in batch_outputs:
            continue
        _check_dims(model, tensor.name, found.dims, dims, batched=batched, exact=True)


def _find(tensors: dict[str, TensorInfo], name: str, kind: str) -> TensorInfo:
    if name not in tensors:
        raise ModelConfigError(
            f"unexpected inference {kind} '{name}', allowed {kind}s are: {', '.join(sorted(tensors))}"
        )
    return tensors[name]


def _check_type(
    model: str,
    kind: str,
    tensor: model_config_pb2.ModelInput | model_config_pb2.ModelOutput,
    found: TensorInfo,
) -> None:
    if tensor.data_type != found.data_type:
        raise ModelConfigError(
            f"unable to load model '{model}', configuration expects datatype "
            f"{model_config_pb2.DataType.Name(tensor.data_type)} for {kind} '{tensor.name}', model provides "
            f"{type_name(found.data_type)}"
        )


def _check_dims(
    model: str, name: str, model_dims: tuple[int, ...], dims: list[int], *, batched: bool, exact: bool
) -> None:
    """Triton's ``CompareDimsSupported``; a scalar in the model takes only 1s in the configuration."""
    where = f"model '{model}', tensor '{name}'"
    if not model_dims:
        if any(d != 1 for d in dims):
            raise ModelConfigError(
                f"unable to load model '{model}', scalar tensor '{name}', should only provide 1 in the model "
                f"configuration when the model doesn't support batching. Model configuration provided: "
                f"{shape_text(dims)}."
            )
        return
    if batched and model_dims[0] != WILDCARD:
        raise ModelConfigError(
            f"{where}: for the model to support batching the shape should have at least 1 dimension and "
            f"the first dimension must be -1; but shape expected by the model is {shape_text(model_dims)}"
        )
    full = [WILDCARD, *dims] if batched else dims
    same = len(model_dims) == len(full) and all(
        m == d for m, d in zip(model_dims, full, strict=True) if exact or m != WILDCARD
    )
    if same:
        return
    if batched:
        specified = (
            f"{len(full)} dimensions (an initial batch dimension because max_batch_size > 0 followed by the "
            f"explicit tensor shape, making complete shape {shape_text(full)})"
        )
    else:
        specified = f"{len(dims)} dimensions (shape {shape_text(dims)})"
    raise ModelConfigError(
        f"{where}: the model expects {len(model_dims)} dimensions (shape {shape_text(model_dims)}) but the "
        f"model configuration specifies {specified}"
    )
