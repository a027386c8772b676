"""An onnxruntime session as an MLServer custom runtime (copied by benchmarks.compare).

Runs in MLServer's own virtualenv, never imported by the benchmark. The ONNX file is the model setting's
``parameters.uri``, the intra-op threads its ``parameters.extra.threads``
(spin-waiting as ``parameters.extra.spinning``).
"""

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxRuntimeModel(MLModel):
    async def load(self) -> bool:
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(self.settings.parameters.extra["threads"])
        spinning = str(self.settings.parameters.extra["spinning"])
        options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            self.settings.parameters.uri, options, providers=["CPUExecutionProvider"]
        )
        self._outputs = [o.name for o in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        results = self._session.run(self._outputs, feeds)
        outputs = [NumpyCodec.encode_output(n, r) for n, r in zip(self._outputs, results, strict=True)]
        return InferenceResponse(model_name=self.name, outputs=outputs)
