"""KEDA's ScaledObject for the replicas, and the replica count Kubernetes derives from its metric.

The trigger is Prometheus's load query (queue time per execution, ms). That metric is intensive
(per execution, not a count of work), so the trigger uses ``metricType: Value``: the HPA then asks
for ``ceil(current * value / threshold)`` replicas, which :func:`desired_replicas` reproduces so
tests can check the query against a real Prometheus without a cluster. The HPA behaviour windows
are SuperSONIC's defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Kubernetes's --horizontal-pod-autoscaler-tolerance default: no change within 10 % of the target.
HPA_TOLERANCE = 0.1


@dataclass(frozen=True)
class Scaling:
    threshold_ms: float = 5.0
    min_replicas: int = 1
    max_replicas: int = 10
    polling_interval_s: int = 30
    cooldown_period_s: int = 120
    window_s: int = 120  # stabilization, both directions
    step_replicas: int = 1  # at most this many replicas added or removed ...
    step_period_s: int = 30  # ... per this period

    def __post_init__(self) -> None:
        if not 0 < self.min_replicas <= self.max_replicas:
            raise ValueError(f"replicas: need 0 < min {self.min_replicas} <= max {self.max_replicas}")
        if self.threshold_ms <= 0:
            raise ValueError(f"scaling threshold {self.threshold_ms} ms must be > 0")


def desired_replicas(current: int, value: float | None, scaling: Scaling) -> int:
    """The HPA's answer for an External metric with a ``Value`` target (before stabilization).

    ``value`` None or NaN (no execution in the window): no load, so the minimum.
    """
    if value is None or math.isnan(value):
        return scaling.min_replicas
    ratio = value / scaling.threshold_ms
    wanted = current if abs(ratio - 1.0) <= HPA_TOLERANCE else math.ceil(current * ratio)
    return max(scaling.min_replicas, min(scaling.max_replicas, wanted))


def _rules(scaling: Scaling) -> dict[str, Any]:
    return {
        "stabilizationWindowSeconds": scaling.window_s,
        "policies": [
            {"type": "Pods", "value": scaling.step_replicas, "periodSeconds": scaling.step_period_s}
        ],
    }


def scaled_object(deployment: str, prometheus_url: str, query: str, scaling: Scaling) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": deployment, "labels": {"app.kubernetes.io/component": "autoscaling"}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
            "pollingInterval": scaling.polling_interval_s,
            "cooldownPeriod": scaling.cooldown_period_s,
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleUp": _rules(scaling), "scaleDown": _rules(scaling)}
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": query,
                        "threshold": f"{scaling.threshold_ms:g}",
                        # No execution in the window gives NaN/no data: that is no load, not an error.
                        "ignoreNullValues": "true",
                    },
                }
            ],
        },
    }
