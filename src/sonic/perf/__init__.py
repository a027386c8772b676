"""Performance toolkit: ``sonic perf`` (load generator), ``sonic analyze`` (configuration sweep) and
``sonic scale`` (processing-time scaling model and discrete-event simulation).

- :mod:`sonic.perf.engine`: closed-loop (concurrency) and open-loop (request rate) load, measurement
  windows with a stability rule, server-side breakdown from ModelStatistics deltas.
- :mod:`sonic.perf.inputs`: input tensors from the server's model metadata and config.
- :mod:`sonic.perf.transport`: how requests travel (gRPC today; the seam for shared memory).
- :mod:`sonic.perf.analyze`: start our server per candidate config, measure, rank.
- :mod:`sonic.perf.scaling` and :mod:`sonic.perf.simulate`: seed 002's model and a simulation.
"""
