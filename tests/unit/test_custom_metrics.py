"""The registry behind ``pb_utils.MetricFamily``: Triton's rules for kinds, values and names, and lifetimes."""

from __future__ import annotations

import pytest

from sonic.server.backends import pb_metrics
from sonic.server.backends.pb_utils import TritonModelException
from sonic.server.metrics.custom import CustomMetrics, MetricError, MetricKind

pytestmark = pytest.mark.unit


def test_kinds_take_only_their_own_updates() -> None:
    registry = CustomMetrics()
    for name, kind in (("c", MetricKind.COUNTER), ("g", MetricKind.GAUGE), ("h", MetricKind.HISTOGRAM)):
        registry.add_family(name, f"{name} help", kind)
    counter = registry.add_metric("c", {"a": "1"}, None)
    gauge = registry.add_metric("g", {}, None)
    histogram = registry.add_metric("h", {}, [1.0, 2.0])
    registry.increment("c", counter, 2)
    with pytest.raises(MetricError, match="cannot be decremented"):
        registry.increment("c", counter, -1)
    with pytest.raises(MetricError, match="counter: it cannot be set"):
        registry.set("c", counter, 5)
    registry.set("g", gauge, -3)
    registry.increment("g", gauge, 1)
    registry.observe("h", histogram, 1.5)
    with pytest.raises(MetricError, match="histogram: it cannot give a value"):
        registry.value("h", histogram)
    assert (registry.value("c", counter), registry.value("g", gauge)) == (2.0, -2.0)
    text = "\n".join(registry.lines())
    assert 'c{a="1"} 2.0' in text
    assert 'h_bucket{le="1.0"} 0' in text
    assert 'h_bucket{le="2.0"} 1' in text
    assert 'h_bucket{le="+Inf"} 1' in text


def test_names_buckets_and_reuse_follow_the_rules() -> None:
    registry = CustomMetrics()
    with pytest.raises(MetricError, match="not a Prometheus name"):
        registry.add_family("bad name", "", MetricKind.GAUGE)
    registry.add_family("f", "help", MetricKind.HISTOGRAM)
    registry.add_family("f", "help", MetricKind.HISTOGRAM)  # the same family, one more user
    with pytest.raises(MetricError, match="same kind and description"):
        registry.add_family("f", "help", MetricKind.COUNTER)
    with pytest.raises(MetricError, match="need buckets"):
        registry.add_metric("f", {}, None)
    with pytest.raises(MetricError, match="ascending and distinct"):
        registry.add_metric("f", {}, [2.0, 1.0])
    registry.drop_family("f")
    assert "# TYPE f histogram" in "\n".join(registry.lines())  # one user left
    registry.drop_family("f")
    assert not list(registry.lines())


def test_a_scope_drops_what_its_instance_made_when_it_closes() -> None:
    registry = CustomMetrics()
    scope = pb_metrics.MetricsScope(registry)
    token = pb_metrics.current_metrics.set(scope)
    try:
        family = pb_metrics.MetricFamily("requests", "Requests", pb_metrics.MetricFamily.COUNTER)
        metric = family.Metric(labels={"model": "m"})
        metric.increment(1)
        with pytest.raises(TritonModelException, match="cannot be decremented"):
            metric.increment(-1)
    finally:
        pb_metrics.current_metrics.reset(token)
    assert 'requests{model="m"} 1.0' in "\n".join(registry.lines())
    scope.close()  # the instance closes while the model still holds its objects
    assert not list(registry.lines())
    assert metric is not None


def test_outside_a_served_model_a_family_is_a_clear_error() -> None:
    with pytest.raises(TritonModelException, match="only in a model served by a server"):
        pb_metrics.MetricFamily("x", "", pb_metrics.MetricFamily.GAUGE)
