"""Scale-out deployment on existing engines: Envoy in front of ``sonic serve`` replicas, Prometheus, KEDA.

One source renders every configuration (Envoy, Prometheus, KEDA, Grafana) for both targets:
``sonic deploy local`` runs the stack for real on one host, ``sonic deploy render`` writes the
Kubernetes files under ``deploy/kubernetes/``. Nothing here proxies or schedules requests itself.
"""
