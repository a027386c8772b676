"""Models for tests, benchmarks and demos, built locally (never downloaded).

- :mod:`.zoo`: the reference models of the seed studies; :mod:`.build` exports them as a model repository,
  :mod:`.torchscript` as TorchScript for the ``pytorch`` backend;
- :mod:`.simple` and :mod:`.testing`: small ONNX models for protocol tests and overhead (and a small classifier);
- :mod:`.fp16`: an ONNX model's FP16 conversion with the same FP32 interface (``sonic validate``'s example);
- :mod:`.deepmet` (a DeepMET-like TensorFlow model), :mod:`.ragged` (ragged batching), :mod:`.sequence`
  (a stateful model for the sequence batcher), :mod:`.streaming` (an ML4GW ``hermes``-style streaming ensemble).
"""
