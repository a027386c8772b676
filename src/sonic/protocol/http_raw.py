"""Triton's raw binary HTTP request: ``Inference-Header-Content-Length: 0`` and no JSON at all.

The whole body is the data of the model's one input; its datatype and shape come from the model
configuration, as Triton 2.51 deduces them (measured against it, see docs/server-operations.md):

* the model must have exactly one input (else ``Raw request must only have 1 input ...``);
* the shape is the config's dims, after a batch dimension of 1 when the model batches; one ``-1``
  dimension takes what the body's size gives (whole elements, rounded down), a second one is refused;
* a BYTES input must have the shape ``[1]`` (one element, ``[1, 1]`` when batched): the body is that
  element's bytes, without a length prefix;
* the body must then fill the shape, or it is ``input byte size mismatch for input 'raw_input' ...``
  (Triton names the input ``raw_input`` there);
* every output is asked for, and every output comes back as binary data.

The body stays one view (no copy) except for BYTES, whose one element is the body's bytes.
"""

from __future__ import annotations

import numpy as np

from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError, quote
from sonic.protocol.http_json import OutputChoice
from sonic.protocol.model_config import ModelSpec
from sonic.protocol.types import InferRequest, InputTensor

ALL_BINARY = OutputChoice(binary_default=True, binary={})


def raw_shape(spec: ModelSpec, size: int, where: str) -> tuple[int, ...]:
    """The one input's shape for a body of ``size`` bytes, as Triton deduces it (its words if it cannot)."""
    if len(spec.inputs) != 1:
        raise InvalidArgumentError(
            f"{where}: Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(spec.inputs)} inputs in {quote(spec.name)} model configuration"
        )
    tensor = next(iter(spec.inputs.values()))
    shape = [1] if spec.batched else []
    variable = -1  # the index of the one -1 dimension in ``shape``
    elements = 1  # of the fixed dimensions
    for dim in tensor.dims:
        if dim == -1:
            if variable != -1:
                raise InvalidArgumentError(
                    f"{where}: The shape of the raw input {quote(tensor.name)} can not be deduced because "
                    "there are more than one variable-sized dimension"
                )
            variable = len(shape)
        else:
            elements *= dim
        shape.append(dim)
    if tensor.datatype.name == "BYTES":
        if variable != -1 or elements != 1:
            raise InvalidArgumentError(
                f"{where}: For BYTE datatype raw input {quote(tensor.name)}, the model must have input "
                "shape [1]"
            )
    elif variable != -1:
        per_row = elements * tensor.datatype.numpy.itemsize
        shape[variable] = size // per_row if per_row else 0
    return tuple(shape)


def decode_raw_request(
    body: bytes | bytearray, spec: ModelSpec, model_name: str, model_version: str, where: str
) -> tuple[InferRequest, OutputChoice]:
    """The request a raw binary body makes to the model ``spec`` (``where``: the model, for errors)."""
    shape = raw_shape(spec, len(body), where)
    tensor = next(iter(spec.inputs.values()))
    datatype = tensor.datatype
    if datatype.name == "BYTES":
        items = np.empty(1, dtype=np.object_)
        items[0] = bytes(body)
        raw = InputTensor(tensor.name, datatype.name, shape, array=items.reshape(shape))
    else:
        expected = dtypes.element_count(shape) * datatype.numpy.itemsize
        # Triton's words; 'raw_input' is the name Triton gives the request's input (written out, so that
        # the words name this site and not the model's check of an input's byte size, which says the same)
        if len(body) != expected:
            raise InvalidArgumentError(
                f"{where} input 'raw_input': input byte size mismatch for input 'raw_input' for model "
                f"{quote(spec.name)}. Expected {expected}, got {len(body)}"
            )
        raw = InputTensor(tensor.name, datatype.name, shape, raw=memoryview(body))
    return InferRequest(model_name=model_name, model_version=model_version, inputs=[raw]), ALL_BINARY
