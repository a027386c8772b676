"""Command-line interface: ``sonic <command>``, one module per subcommand, each with ``add_parser`` and ``run``.

- :mod:`.main`: the entry point and the subcommand table;
- :mod:`.serve` (``sonic serve``), with its option groups, each one argparse group and one builder of its
  frozen ``sonic.server.config`` group: :mod:`.serve_grpc`, :mod:`.serve_http` (HTTP/REST and metrics),
  :mod:`.serve_budget` (the request buffer budget), :mod:`.serve_security`, :mod:`.serve_traffic`
  (``--traffic-log``); and :mod:`.triton_flags` (``tritonserver``'s flags, accepted as Triton spells them);
- :mod:`.perf` (``sonic perf``) and :mod:`.perf_replay` (``sonic perf --replay``);
- :mod:`.analyze` (``sonic analyze``) and :mod:`.analyze_traffic` (``sonic analyze --traffic``);
- :mod:`.validate` (``sonic validate``: recorded traffic replayed to two setups, outputs compared);
- :mod:`.scale` (``sonic scale``), :mod:`.demo` (``sonic demo``), :mod:`.deploy` (``sonic deploy``),
  :mod:`.models` (``sonic models``), :mod:`.cmstriton` (``sonic cmstriton``, CMSSW's ``cmsTriton``);
- :mod:`.event_loop`: ``--loop`` (uvloop when installed) for ``sonic serve`` and ``sonic perf``.
"""
