"""The load metric, Prometheus's scrape configuration and recording rules, for both deployments.

The load metric is Triton's: queue time per model execution, in milliseconds, over all replicas
and models. It is what KEDA scales on and what the admission filter compares with its threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sonic.deploy.envoy_settings import REPLICA_CLUSTER

LOAD_RECORD = "sonic:queue_time_per_execution_ms"


def load_query(window: str = "30s") -> str:
    """Average queue time per execution (ms). KEDA needs one value, hence sums over every series."""
    return (
        f"sum(rate(nv_inference_queue_duration_us[{window}]))"
        f" / (sum(rate(nv_inference_exec_count[{window}])) * 1000)"
    )


def recording_rules(window: str = "30s") -> dict[str, Any]:
    """Rules for dashboards and alerts (KEDA and the admission filter use the raw query: no rule delay)."""
    return {
        "groups": [
            {
                "name": "sonic",
                "rules": [
                    {"record": LOAD_RECORD, "expr": load_query(window)},
                    {
                        "record": "sonic:request_rate",
                        "expr": f"sum by (model) (rate(nv_inference_request_success[{window}]))",
                    },
                    {
                        "record": "sonic:average_batch_size",
                        "expr": f"sum(rate(nv_inference_count[{window}]))"
                        f" / sum(rate(nv_inference_exec_count[{window}]))",
                    },
                ],
            }
        ]
    }


@dataclass(frozen=True)
class ScrapeTargets:
    """One host: every replica's metrics address and Envoy's admin address."""

    replicas: Sequence[str]
    envoy_admin: str


def _global(scrape_interval: str) -> dict[str, Any]:
    return {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval}


def local_prometheus_config(targets: ScrapeTargets, rules_file: str, scrape_interval: str) -> dict[str, Any]:
    return {
        "global": _global(scrape_interval),
        "rule_files": [rules_file],
        "scrape_configs": [
            {"job_name": "sonic", "static_configs": [{"targets": list(targets.replicas)}]},
            {
                "job_name": "envoy",
                "metrics_path": "/stats/prometheus",
                "static_configs": [{"targets": [targets.envoy_admin]}],
            },
        ],
    }


def _endpoints_job(job: str, service: str, port_name: str, metrics_path: str) -> dict[str, Any]:
    """Every ready endpoint of one Service's named port, in the Prometheus pod's own namespace."""
    return {
        "job_name": job,
        "metrics_path": metrics_path,
        "kubernetes_sd_configs": [{"role": "endpoints", "namespaces": {"own_namespace": True}}],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_service_name", "__meta_kubernetes_endpoint_port_name"],
                "regex": f"{service};{port_name}",
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
    }


def kubernetes_prometheus_config(rules_file: str, scrape_interval: str = "5s") -> dict[str, Any]:
    return {
        "global": _global(scrape_interval),
        "rule_files": [rules_file],
        "scrape_configs": [
            _endpoints_job("sonic", "sonic-replicas", "metrics", "/metrics"),
            _endpoints_job("envoy", "sonic-envoy", "admin", "/stats/prometheus"),
        ],
    }


def envoy_healthy_replicas() -> str:
    return f'max(envoy_cluster_membership_healthy{{envoy_cluster_name="{REPLICA_CLUSTER}"}})'
