"""Performance toolkit: ``sonic perf`` (load generator), ``sonic analyze`` (configuration sweep) and
``sonic scale`` (processing-time scaling model and discrete-event simulation).

- :mod:`sonic.perf.engine`: closed-loop (concurrency) and open-loop (request rate) load, measurement
  windows with a stability rule, server-side breakdown from ModelStatistics deltas.
- :mod:`sonic.perf.ranges`: the ``START:END:STEP`` ranges of the command-line options.
- :mod:`sonic.perf.stats`: percentiles, the stability rule, the server breakdown.
- :mod:`sonic.perf.inputs`: input tensors from the server's model metadata and config, or a file.
- :mod:`sonic.perf.transport`: how requests travel (gRPC, over either of the client's transports).
- :mod:`sonic.perf.shm`: ``--shared-memory system``: inputs written once into POSIX shared-memory regions,
  outputs into perf_analyzer-sized slots, every region registered before the load and given back after.
- :mod:`sonic.perf.report` and :mod:`sonic.perf.plot`: CSV, JSON and PNG output.
- :mod:`sonic.perf.perf_analyzer_csv`: perf_analyzer 2.51's ``-f`` CSV (``--csv-format perf_analyzer``).
- :mod:`sonic.perf.analyze` and :mod:`sonic.perf.analyze_report`: start our server per candidate
  config, measure, rank, write the best ``config.pbtxt`` and a report.
- :mod:`sonic.perf.scaling` and :mod:`sonic.perf.simulate`: seed 002's model, its fit, a simulation.
- :mod:`sonic.perf.synthetic`: a model whose cost is fixed per execution (a known answer for tests).
- :mod:`sonic.perf.replay` and :mod:`sonic.perf.analyze_traffic`: a recorded traffic log sent again on its
  times (``sonic perf --replay``), and configurations tuned on it (``sonic analyze --traffic``);
  :mod:`sonic.perf.decide`: whether a candidate beats the current configuration over paired rounds.
"""
