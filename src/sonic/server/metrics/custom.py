"""Custom metrics of Python models (``pb_utils.MetricFamily``), exported at ``/metrics`` beside the server's.

Triton's Python backend lets a model define metric families (counter, gauge, histogram) and, in each, one
metric per label set; Triton exports them with its own metrics. One registry per server holds them for
every model. A family or metric lives while some model object holds it: each ``pb_utils`` object counts
itself in here and is counted out when it is collected (so an unloaded model's metrics disappear, as in
Triton). Model threads update values under one lock; the metrics front end renders them at each scrape.
"""

from __future__ import annotations

import bisect
import enum
import math
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

Labels = tuple[tuple[str, str], ...]


class MetricKind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class MetricError(ValueError):
    """A use of a metric that Triton refuses too (pb_utils raises it as TritonModelException)."""


@dataclass
class _Metric:
    buckets: tuple[float, ...] = ()  # histogram upper bounds, ascending
    value: float = 0.0  # counter and gauge; a histogram's sum
    counts: list[int] = field(default_factory=list)  # histogram: per bucket, then +Inf
    users: int = 0


@dataclass
class _Family:
    description: str
    kind: MetricKind
    metrics: dict[Labels, _Metric] = field(default_factory=dict)
    users: int = 0


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels_text(labels: Labels, extra: str = "") -> str:
    parts = [f'{key}="{_escape(value)}"' for key, value in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    return (
        repr(float(value))
        if math.isfinite(value)
        else ("+Inf" if value > 0 else "-Inf" if value < 0 else "NaN")
    )


class CustomMetrics:
    """The server's registry of model-defined metric families."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}

    def add_family(self, name: str, description: str, kind: MetricKind) -> None:
        """Count a user of family ``name``, creating it; the same name must keep its description and kind."""
        if not _NAME.match(name):
            raise MetricError(
                f"metric family name '{name}' is not a Prometheus name ([a-zA-Z_:][a-zA-Z0-9_:]*)"
            )
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _Family(description, kind)
            elif (family.description, family.kind) != (description, kind):
                raise MetricError(
                    f"metric family '{name}' already exists as a {family.kind.value} described "
                    f"'{family.description}'; a family of the same name must have the same kind and description"
                )
            family.users += 1

    def drop_family(self, name: str) -> None:
        with self._lock:
            family = self._families.get(name)
            if family is not None:
                family.users -= 1
                if family.users <= 0:
                    del self._families[name]

    def add_metric(self, name: str, labels: Mapping[str, str], buckets: Sequence[float] | None) -> Labels:
        """Count a user of the metric of family ``name`` with ``labels``, creating it; its key."""
        key: Labels = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        for label, _ in key:
            if not _LABEL.match(label):
                raise MetricError(f"metric label name '{label}' is not a Prometheus label name")
        with self._lock:
            family = self._families[name]
            if family.kind is MetricKind.HISTOGRAM:
                if buckets is None:
                    raise MetricError(f"metric family '{name}' is a histogram: its metrics need buckets")
                bounds = tuple(float(b) for b in buckets)
                if list(bounds) != sorted(set(bounds)):
                    raise MetricError(
                        f"histogram buckets of '{name}' must be ascending and distinct, got {bounds}"
                    )
            elif buckets is not None:
                raise MetricError(
                    f"metric family '{name}' is a {family.kind.value}: only histograms take buckets"
                )
            else:
                bounds = ()
            metric = family.metrics.get(key)
            if metric is None:
                metric = family.metrics[key] = _Metric(bounds, counts=[0] * (len(bounds) + 1))
            elif metric.buckets != bounds:
                raise MetricError(f"metric {name}{_labels_text(key)} exists with buckets {metric.buckets}")
            metric.users += 1
        return key

    def drop_metric(self, name: str, key: Labels) -> None:
        with self._lock:
            family = self._families.get(name)
            metric = family.metrics.get(key) if family is not None else None
            if family is not None and metric is not None:
                metric.users -= 1
                if metric.users <= 0:
                    del family.metrics[key]

    def _metric(self, name: str, key: Labels, allowed: tuple[MetricKind, ...], action: str) -> _Metric:
        family = self._families[name]
        if family.kind not in allowed:
            raise MetricError(f"metric family '{name}' is a {family.kind.value}: it cannot {action}")
        return family.metrics[key]

    def increment(self, name: str, key: Labels, value: float) -> None:
        with self._lock:
            metric = self._metric(name, key, (MetricKind.COUNTER, MetricKind.GAUGE), "be incremented")
            if self._families[name].kind is MetricKind.COUNTER and value < 0:
                raise MetricError(f"counter '{name}' cannot be decremented (increment by {value})")
            metric.value += value

    def set(self, name: str, key: Labels, value: float) -> None:
        with self._lock:
            self._metric(name, key, (MetricKind.GAUGE,), "be set").value = value

    def value(self, name: str, key: Labels) -> float:
        with self._lock:
            return self._metric(name, key, (MetricKind.COUNTER, MetricKind.GAUGE), "give a value").value

    def observe(self, name: str, key: Labels, value: float) -> None:
        with self._lock:
            metric = self._metric(name, key, (MetricKind.HISTOGRAM,), "observe a value")
            metric.counts[bisect.bisect_left(metric.buckets, value)] += 1
            metric.value += value

    def lines(self) -> Iterator[str]:
        """The Prometheus text of every family."""
        with self._lock:
            families = sorted(self._families.items())
            for name, family in families:
                yield f"# HELP {name} {family.description}"
                yield f"# TYPE {name} {family.kind.value}"
                for key, metric in sorted(family.metrics.items()):
                    if family.kind is not MetricKind.HISTOGRAM:
                        yield f"{name}{_labels_text(key)} {_number(metric.value)}"
                        continue
                    cumulative = 0
                    for bound, count in zip((*metric.buckets, math.inf), metric.counts, strict=True):
                        cumulative += count
                        le = 'le="' + _number(bound) + '"'
                        yield f"{name}_bucket{_labels_text(key, le)} {cumulative}"
                    yield f"{name}_sum{_labels_text(key)} {_number(metric.value)}"
                    yield f"{name}_count{_labels_text(key)} {cumulative}"
