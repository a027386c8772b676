"""Triton's classification extension: an output asked with ``classification`` k answers its top k as text.

A client asks it per requested output (gRPC ``parameters["classification"].int64_param``, HTTP JSON
``"parameters": {"classification": k}``, tritonclient's ``InferRequestedOutput(name, class_count=k)``);
the codecs put it in :attr:`InferRequest.output_classes`. The model runs as always; the answer replaces
that output by a BYTES tensor, as Triton 2.51 does (its ``src/classification.cc`` and the response
writers of its gRPC and HTTP front ends):

- per batch row of a batching model (the whole tensor otherwise), the k largest elements of the row,
  flattened, largest first, each as ``"value:index"`` or ``"value:index:label"``;
- shape ``[batch, min(k, row elements)]`` (``[min(k, elements)]`` for a model that does not batch);
- values printed as C++'s ``std::to_string``: ``%f`` for FP32/FP64 (``0.500000``), decimal integers;
- labels are the lines of the output's ``label_filename`` (a file in the model's folder, read at load
  through :mod:`sonic.server.models.paths`); an index past the last line, or an empty line, has no label.
- FP16, BF16, BOOL and BYTES outputs are refused in Triton's words.

Classes of equal value come in Triton's order (:mod:`sonic.server.classification.order`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import numpy as np
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InvalidArgumentError, ModelConfigError, quote
from sonic.protocol.types import InferResponse, OutputTensor
from sonic.server.classification.order import top_indices
from sonic.server.models.paths import ModelFiles

Labels = Mapping[str, tuple[bytes, ...]]  # output name -> one label per class index ("" for none)

# Elements of classified outputs beyond which sorting and printing them leaves the event loop (a thread).
OFF_LOOP_ELEMENTS = 1 << 14
_FLOATS = frozenset({"FP32", "FP64"})
_INTEGERS = frozenset({"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"})


def read_labels(config: model_config_pb2.ModelConfig, files: ModelFiles) -> dict[str, tuple[bytes, ...]]:
    """The labels of every output with a ``label_filename`` (blocking: runs in the load thread).

    As Triton: the file is split into lines at ``\\n`` (no final empty line); a file that cannot be
    read fails the load."""
    labels: dict[str, tuple[bytes, ...]] = {}
    for output in config.output:
        if not output.label_filename:
            continue
        path = files.path(f"output '{output.name}' label_filename", output.label_filename)
        try:
            contents = path.read_bytes()
        except OSError as exc:
            raise ModelConfigError(
                f"failed to open text file for read {path}: {exc.strerror} "
                f"(model {quote(config.name)} output {quote(output.name)} label_filename)"
            ) from None
        lines = contents.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        labels[output.name] = tuple(lines)
    return labels


def classify(
    response: InferResponse, counts: Mapping[str, int], batched: bool, labels: Labels
) -> InferResponse:
    """``response`` with each output named in ``counts`` replaced by its top-k classes (a new response:
    the given one may be the response cache's)."""
    outputs = [
        output if output.name not in counts else _classified(output, counts[output.name], batched, labels)
        for output in response.outputs
    ]
    return InferResponse(response.model_name, response.model_version, response.request_id, outputs)


async def classify_off_loop(
    response: InferResponse, counts: Mapping[str, int], batched: bool, labels: Labels
) -> InferResponse:
    """:func:`classify`, in a worker thread when the classified outputs are large."""
    elements = sum(output.array.size for output in response.outputs if output.name in counts)
    if elements < OFF_LOOP_ELEMENTS:
        return classify(response, counts, batched, labels)
    return await asyncio.to_thread(classify, response, counts, batched, labels)


def _classified(output: OutputTensor, count: int, batched: bool, all_labels: Labels) -> OutputTensor:
    if output.datatype not in _FLOATS and output.datatype not in _INTEGERS:
        raise InvalidArgumentError(
            f"class result not available for output due to unsupported type {quote(output.datatype)}"
        )
    labels = all_labels.get(output.name, ())
    array = output.array
    rows = array.shape[0] if batched and array.ndim > 0 else 1
    # Rows of the flattened tensor; int() keeps the product an int for an empty shape.
    row_elements = int(np.prod(array.shape[1:] if batched and array.ndim > 0 else array.shape))
    kept = min(count, row_elements)
    flat = array.reshape(rows, row_elements)
    top = top_indices(flat, kept)
    values = np.take_along_axis(flat, top, axis=1)
    texts = np.empty((rows, kept), dtype=np.object_)
    number = "%f" if output.datatype in _FLOATS else "%d"
    for row in range(rows):
        for column in range(kept):
            index = int(top[row, column])
            text = f"{number % values[row, column]}:{index}".encode()
            label = labels[index] if index < len(labels) else b""
            texts[row, column] = text + b":" + label if label else text
    shape = (rows, kept) if batched and array.ndim > 0 else (kept,)
    return OutputTensor(output.name, "BYTES", shape, texts.reshape(shape))
