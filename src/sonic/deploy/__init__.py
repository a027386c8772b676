"""Scale-out deployment on existing engines: Envoy in front of ``sonic serve`` replicas, Prometheus, KEDA.

One source renders every configuration (Envoy, Prometheus, KEDA, Grafana) for both targets:
``sonic deploy local`` runs the stack for real on one host, ``sonic deploy render`` writes the
Kubernetes files under ``deploy/kubernetes/``. Nothing here proxies or schedules requests itself.

- :mod:`.envoy` and :mod:`.envoy_settings` (the Envoy in front of the replicas), :mod:`.metrics` (the load metric,
  Prometheus scrape and rules), :mod:`.keda` (the ScaledObject), :mod:`.grafana` (the dashboard),
  :mod:`.kubernetes` (the generated files), :mod:`.yamltext` (YAML text of those dicts);
- ``sonic deploy local``: :mod:`.local` (the stack on one host), :mod:`.replicas` (replicas followed and
  restarted), :mod:`.process` (one child, ready on its log line), :mod:`.binaries` (where Envoy and Prometheus are).
"""
