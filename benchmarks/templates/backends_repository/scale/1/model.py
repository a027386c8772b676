"""A Python-backend model for benchmarks.backends: standardises 16 features (copied into its repository)."""

from __future__ import annotations

from typing import Any

import numpy as np

import triton_python_backend_utils as pb_utils

MEAN = np.linspace(-1.0, 1.0, 16, dtype=np.float32)
STD = np.linspace(0.5, 2.0, 16, dtype=np.float32)


class TritonPythonModel:
    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW")
            assert raw is not None  # the config's one input: the server checked it was sent
            x = raw.as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SCALED", (x - MEAN) / STD)]))
        return responses
