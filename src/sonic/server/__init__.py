"""The inference server: repository, batching, backends and protocol frontends.

- running: :mod:`.config` (what to run, frozen), :mod:`.server` (start-up, ready line, drain), :mod:`.tls`,
  :mod:`.devices` (accelerators, found once), :mod:`.embedded` (the models in-process, no sockets);
- requests in: :mod:`.frontends` (gRPC, HTTP/REST, metrics), :mod:`.guard` (tokens, rate, admission),
  :mod:`.budget` (buffered request bytes), :mod:`.dataplane` (every KServe v2 operation once),
  :mod:`.header_forward` (headers that become request parameters);
- models: :mod:`.manager` (lifecycle), :mod:`.model_entries` (versions' states and reasons),
  :mod:`.repository` and :mod:`.load_config` (what a model loads with), :mod:`.paths` (the one choke point for
  files a configuration names), :mod:`.ensemble_steps`, :mod:`.model` (a loaded version: validation,
  scheduling, statistics), :mod:`.instance_thread` (the thread owning an instance), :mod:`.warmup`;
- execution: :mod:`.work` (the work item and the scheduler interface) and :mod:`.responses` (a decoupled
  request's response channel), below both :mod:`.runtime` (scheduling) :mod:`.backends` (one module per framework), :mod:`.decoupled`
  (a decoupled model's responses), :mod:`.calls` and :mod:`.calls_decoupled` (model-to-model calls: ensembles, BLS),
  :mod:`.cache` (response cache), :mod:`.classification` (an output's top k classes as text) and
  :mod:`.class_order` (their order, as Triton's ``std::sort``);
- around them: :mod:`.shm`, :mod:`.shm_open` and :mod:`.shm_request` (system shared memory; one request's
  regions resolved once), :mod:`.stats`, :mod:`.metrics` and :mod:`.custom_metrics`
  (statistics, Prometheus, Python models' own metrics), :mod:`.observe` (log record and span per request), :mod:`.traffic_rows`,
  :mod:`.traffic_table` and :mod:`.traffic_switch` (``--traffic-log``, switched on and off),
  :mod:`.log_settings` (Triton's log-settings API), :mod:`.trace` (Triton's trace extension: sampling and
  each traced request's record) with :mod:`.trace_config` (its flags), :mod:`.trace_settings` (global and
  per-model settings, the API's changes), :mod:`.trace_file` (the trace files' writer thread) and
  :mod:`.trace_otel` (its OpenTelemetry mode).
"""
