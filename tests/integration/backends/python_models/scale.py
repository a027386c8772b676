"""Config from auto_complete_config; batched; per-request errors; reports the size of each request list."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils

MEAN = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
STD = np.linspace(0.5, 2.0, 8, dtype=np.float32)


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(32)
        auto_complete_model_config.add_input({"name": "RAW", "data_type": "TYPE_FP32", "dims": [8]})
        auto_complete_model_config.add_output({"name": "SCALED", "data_type": "TYPE_FP32", "dims": [8]})
        auto_complete_model_config.add_output({"name": "BATCH_LIST", "data_type": "TYPE_INT32", "dims": [1]})
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        assert config["max_batch_size"] == 32, config
        assert config["input"][0]["dims"] == [8], config
        self.name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW").as_numpy()
            if np.isnan(raw).any():
                error = pb_utils.TritonError("RAW holds NaN", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            count = np.full((raw.shape[0], 1), len(requests), dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("SCALED", ((raw - MEAN) / STD).astype(np.float32)),
                        pb_utils.Tensor("BATCH_LIST", count),
                    ]
                )
            )
        return responses
