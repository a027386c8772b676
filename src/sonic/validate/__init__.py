"""``sonic validate``: recorded traffic replayed to a reference and a candidate setup, outputs compared.

- :mod:`.compare`: the comparison, pure numpy (ULP distance, tolerances, per-output statistics);
- :mod:`.source`: the recorded requests, read lazily from the traffic folder, and how many (seeded
  synthetic inputs for those recorded without contents);
- :mod:`.targets`: where requests go (gRPC, HTTP, or a repository in this process: ``direct:``);
- :mod:`.run`: one replay to both targets, in order, a bounded number in flight, deadlines per request;
- :mod:`.report`: the terminal table, the HTML page (histograms, worst requests) and JSON.
"""
