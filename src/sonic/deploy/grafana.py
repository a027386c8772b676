"""The Grafana dashboard: one time-series panel per question an operator asks, PromQL from one table.

``$__rate_interval`` is Grafana's own variable (at least four scrape intervals); the tests replace
it with a concrete window and run every expression against a real Prometheus.
"""

from __future__ import annotations

from typing import Any

from sonic.deploy.envoy_settings import INGRESS_STAT_PREFIX, REPLICA_CLUSTER
from sonic.deploy.metrics import LOAD_RECORD, envoy_healthy_replicas

RATE_INTERVAL = "$__rate_interval"
_W = RATE_INTERVAL
_CLUSTER = f'envoy_cluster_name="{REPLICA_CLUSTER}"'


def _quantile(q: float, metric: str, by: str = "le", match: str = "") -> str:
    selector = f"{{{match}}}" if match else ""
    return f"histogram_quantile({q}, sum by ({by}) (rate({metric}_bucket{selector}[{_W}])))"


# (title, unit, [(legend, expr), ...])
PANELS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    (
        "Inference requests per second",
        "reqps",
        (("{{model}}", f"sum by (model) (rate(nv_inference_request_success[{_W}]))"),),
    ),
    (
        "Request latency at the replicas",
        "µs",
        tuple(
            (f"p{int(q * 100)}", _quantile(q, "sonic_inference_request_duration_us"))
            for q in (0.5, 0.95, 0.99)
        ),
    ),
    (
        "Queue time per execution (load metric)",
        "ms",
        (("all replicas", LOAD_RECORD),),
    ),
    (
        "Queue time percentiles",
        "µs",
        (("p99", _quantile(0.99, "sonic_inference_queue_duration_us")),),
    ),
    (
        "Average batch size",
        "none",
        (
            (
                "{{model}}",
                (
                    f"sum by (model) (rate(nv_inference_count[{_W}]))"
                    f" / sum by (model) (rate(nv_inference_exec_count[{_W}]))"
                ),
            ),
        ),
    ),
    (
        "Requests waiting",
        "none",
        (("{{model}}", "sum by (model) (nv_inference_pending_request_count)"),),
    ),
    (
        "Replicas",
        "none",
        (
            ("scraped by Prometheus", 'count(up{job="sonic"} == 1)'),
            ("healthy in Envoy", envoy_healthy_replicas()),
        ),
    ),
    (
        "Envoy: upstream requests and retries per second",
        "reqps",
        (
            ("requests", f"sum(rate(envoy_cluster_upstream_rq_total{{{_CLUSTER}}}[{_W}]))"),
            ("retries", f"sum(rate(envoy_cluster_upstream_rq_retry{{{_CLUSTER}}}[{_W}]))"),
            (
                "resets",
                f"sum(rate(envoy_cluster_upstream_cx_destroy_remote_with_active_rq{{{_CLUSTER}}}[{_W}]))",
            ),
        ),
    ),
    (
        "Envoy: upstream request time",
        "ms",
        (("p99", _quantile(0.99, "envoy_cluster_upstream_rq_time", match=_CLUSTER)),),
    ),
    (
        "Admission: new jobs refused per second",
        "reqps",
        (
            (
                "refused",
                f'sum(rate(envoy_http_rq_direct_response{{envoy_http_conn_manager_prefix="{INGRESS_STAT_PREFIX}"}}[{_W}]))',
            ),
        ),
    ),
)


def expressions() -> list[str]:
    return [expr for _, _, targets in PANELS for _, expr in targets]


def _panel(index: int, title: str, unit: str, targets: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + n), "expr": expr, "legendFormat": legend}
            for n, (legend, expr) in enumerate(targets)
        ],
    }


def dashboard() -> dict[str, Any]:
    return {
        "title": "sonic",
        "uid": "sonic-deployment",
        "schemaVersion": 39,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}
            ]
        },
        "panels": [_panel(i, title, unit, targets) for i, (title, unit, targets) in enumerate(PANELS)],
    }
