"""sonic serve against NVIDIA Triton, Seldon MLServer and direct onnxruntime, in one run
(``python -m benchmarks.compare``; ``__main__`` says what and how).

- ``workloads``: what is measured, on which servers; ``repositories``: the three model repositories,
  the other servers' model code copied from ``templates/``; ``servers``: starting each server;
  ``measure``: windows and the rounds that visit every (workload, server); ``summary``: medians,
  paired ratios, targets and the docs table; ``plot``: docs/compare.png.
"""
