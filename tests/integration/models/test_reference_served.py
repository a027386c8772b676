"""Every ONNX reference model, served by ``sonic serve``, gives what onnxruntime and PyTorch give directly.

Tolerances: served vs in-process onnxruntime, the same model file run by the same library:
``rtol=1e-5, atol=1e-6`` (only the thread count may differ). Served vs the PyTorch module:
``rtol=1e-4, atol=5e-5``, the usual float32 distance between PyTorch and onnxruntime kernels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import torch
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from sonic.launch import ServerProcess
from sonic.models.zoo import ReferenceModel, registry

pytestmark = pytest.mark.integration

ONNX_MODELS = sorted(name for name, model in registry().items() if model.is_onnx)
BATCH = 3
# (rtol, atol)
SERVED_VS_ORT = (1e-5, 1e-6)
SERVED_VS_TORCH = (1e-4, 5e-5)


def _infer(
    server: ServerProcess, model: ReferenceModel, inputs: dict[str, npt.NDArray[Any]]
) -> dict[str, Any]:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        request = []
        for name in model.input_names:
            tensor = grpcclient.InferInput(
                name, list(inputs[name].shape), np_to_triton_dtype(inputs[name].dtype)
            )
            tensor.set_data_from_numpy(inputs[name])
            request.append(tensor)
        outputs = [grpcclient.InferRequestedOutput(name) for name in model.output_names]
        result = client.infer(model.name, request, outputs=outputs)
        return {name: result.as_numpy(name) for name in model.output_names}
    finally:
        client.close()


def _torch_outputs(
    model: ReferenceModel, module: torch.nn.Module, inputs: dict[str, npt.NDArray[Any]]
) -> dict[str, Any]:
    with torch.inference_mode():
        result = module(*(torch.from_numpy(inputs[name]) for name in model.input_names))
    results = result if isinstance(result, tuple) else (result,)
    return {name: value.numpy() for name, value in zip(model.output_names, results, strict=True)}


@pytest.mark.parametrize("name", ONNX_MODELS)
def test_served_outputs_match_onnxruntime_and_pytorch(
    name: str,
    reference_server: ServerProcess,
    onnx_reference_repository: Path,
    reference_modules: dict[str, torch.nn.Module],
) -> None:
    model = registry()[name]
    inputs = model.make_inputs(BATCH, np.random.default_rng(123))

    served = _infer(reference_server, model, inputs)
    session = ort.InferenceSession(
        str(onnx_reference_repository / name / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    direct = dict(zip(model.output_names, session.run(list(model.output_names), inputs), strict=True))
    reference = _torch_outputs(model, reference_modules[name], inputs)

    for output in model.output_names:
        assert served[output].shape == direct[output].shape == reference[output].shape
        assert served[output].shape[0] == BATCH
        np.testing.assert_allclose(served[output], direct[output], *SERVED_VS_ORT, err_msg=f"{name}.{output}")
        np.testing.assert_allclose(
            served[output], reference[output], *SERVED_VS_TORCH, err_msg=f"{name}.{output}"
        )
        # The comparison would prove nothing if the model ignored its input: outputs must differ
        # between the samples of the batch by far more than the tolerance.
        spread = float(np.ptp(served[output], axis=0).max())
        assert spread > 10 * SERVED_VS_TORCH[1], f"{name}.{output} barely depends on its input ({spread})"


def test_served_models_report_their_configured_signature(reference_server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(reference_server.grpc_address)
    try:
        for name in ONNX_MODELS:
            model = registry()[name]
            assert client.is_model_ready(name), name
            metadata = client.get_model_metadata(name)
            assert [t.name for t in metadata.inputs] == list(model.input_names)
            assert [t.name for t in metadata.outputs] == list(model.output_names)
            config = client.get_model_config(name).config
            assert config.dynamic_batching.max_queue_delay_microseconds > 0
            assert config.max_batch_size >= model.seed_batch_size
    finally:
        client.close()


@pytest.mark.parametrize("name", ONNX_MODELS)
def test_parameter_count(name: str, reference_modules: dict[str, torch.nn.Module]) -> None:
    # Here rather than in the unit tests: the session's modules are reused (the ResNets are slow to make).
    module = reference_modules[name]
    assert sum(p.numel() for p in module.parameters()) == registry()[name].parameter_count
