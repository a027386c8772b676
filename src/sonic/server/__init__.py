"""The inference server: repository, batching, backends and protocol frontends.

- running: :mod:`.config` (what to run, frozen), :mod:`.server` (start-up, ready line, drain), :mod:`.tls`,
  :mod:`.devices` (accelerators, found once), :mod:`.embedded` (the models in-process, no sockets);
- requests in: :mod:`.frontends` (gRPC, HTTP/REST, metrics), :mod:`.guard` (tokens, rate, admission),
  :mod:`.budget` (buffered request bytes), :mod:`.malloc` (the process's mmap threshold for large buffers),
  :mod:`.dataplane` (every KServe v2 operation once),
  :mod:`.header_forward` (headers that become request parameters);
- :mod:`.models`: the repository, what a model loads with, the manager of versions and their instances;
- execution: :mod:`.work` (the work item and the scheduler interface) and :mod:`.responses` (a decoupled
  request's response channel), below both :mod:`.runtime` (scheduling) and :mod:`.backends` (one module per
  framework); :mod:`.decoupled` (a decoupled model's responses), :mod:`.calls` (model-to-model calls: ensembles,
  BLS), :mod:`.cache` (response cache), :mod:`.classification` (an output's top k classes as text);
- around them: :mod:`.shm` (system shared memory), :mod:`.metrics` (statistics, Prometheus, Python models' own
  metrics), :mod:`.observe` (log record and span per request), :mod:`.traffic` (``--traffic-log``, switched on
  and off), :mod:`.log_settings` (Triton's log-settings API), :mod:`.trace` (Triton's trace extension).
"""
