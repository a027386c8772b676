"""Models for tests, benchmarks and demos, built locally (never downloaded).

- :mod:`.zoo`: the reference models of the seed studies; :mod:`.build` exports them as a model repository,
  :mod:`.torchscript` as TorchScript for the ``pytorch`` backend;
- :mod:`.simple` and :mod:`.testing`: small ONNX models for protocol tests and overhead;
- :mod:`.deepmet` (a DeepMET-like TensorFlow model), :mod:`.ragged` (ragged batching), :mod:`.sequence`
  (a stateful model for the sequence batcher), :mod:`.streaming` (an ML4GW ``hermes``-style streaming ensemble).
"""
