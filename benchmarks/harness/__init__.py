"""What every benchmark shares, so each script says only what it measures.

- :mod:`benchmarks.harness.rounds`: the visiting order of a paired design (rounds x workloads x servers,
  the servers rotated, alternated or shuffled between rounds).
- :mod:`benchmarks.harness.ratios`: median and spread of the rounds, ratios paired within a round.
- :mod:`benchmarks.harness.servers`: servers started through :mod:`sonic.launch` (one per source tree for
  A/B runs), all stopped by PID on the way out.
- :mod:`benchmarks.harness.load`: ``sonic perf``'s load generator in one-window form, with the CPU it cost;
  a closed loop of any client's calls.
- :mod:`benchmarks.harness.processes`: CPU time and RSS from /proc, steady malloc, Triton's Python stub.
- :mod:`benchmarks.harness.report`: the machine, the saved JSON under benchmarks/results/, Markdown tables.
- :mod:`benchmarks.harness.tls`: a throwaway CA and server certificate for runs that measure TLS.

Scripts run as modules (``python -m benchmarks.NAME`` or ``./dev bench NAME``) so these import.
"""
