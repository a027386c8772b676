"""The seed demonstrators run by ``sonic demo``: ProtoDUNE (seed 002), HLT (seed 000), MiniAOD (seed 001).

- :mod:`.protodune`, :mod:`.hlt`, :mod:`.miniaod`: one module per demonstrator, direct vs service;
- :mod:`.common`: what they share (repositories, tables, output comparison, plots);
- :mod:`.console` (what a person sees while it runs), :mod:`.report` (summary table, HTML report),
  :mod:`.projection` (what a GPU server would give, from the scaling model, never measured).
"""
