"""``pb_utils.MetricFamily`` and its ``Metric``: custom metrics of Python models, as Triton's Python backend.

A model makes a family (``MetricFamily(name, description, MetricFamily.COUNTER)``, or ``GAUGE``,
``HISTOGRAM``) and metrics in it (``family.Metric(labels={...})``; a histogram's with ``buckets=[...]``), then
``increment``, ``set``, ``observe`` and reads ``value()``; the server exports them at ``/metrics``
(:mod:`sonic.server.metrics.custom` holds them). The Python backend binds the server's registry in each
instance's thread; elsewhere (a model's own unit test) making a family is a clear error.
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sonic.server.backends.pb_utils import TritonModelException
from sonic.server.metrics.custom import CustomMetrics, Labels, MetricError, MetricKind


class MetricsScope:
    """One model instance's share of the server's registry: what it made goes when it closes (as Triton's
    stub process goes), even while its objects are still referenced somewhere."""

    def __init__(self, registry: CustomMetrics) -> None:
        self.registry = registry
        self._drops: list[weakref.finalize[Any, Any]] = []

    def track(self, owner: object, drop: Callable[..., None], *args: Any) -> None:
        """Run ``drop(*args)`` once: when ``owner`` is collected or the scope closes, whichever comes first."""
        self._drops.append(weakref.finalize(owner, drop, *args))

    def close(self) -> None:
        for drop in reversed(self._drops):  # metrics before their families
            drop()
        self._drops.clear()


# The scope of the instance whose thread this is, bound by the Python backend.
current_metrics: contextvars.ContextVar[MetricsScope | None] = contextvars.ContextVar(
    "sonic_pb_utils_metrics", default=None
)


class MetricFamily:
    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: object) -> None:
        scope = current_metrics.get()
        if scope is None:
            msg = f"MetricFamily '{name}': custom metrics exist only in a model served by a server"
            raise TritonModelException(msg)
        if not isinstance(kind, MetricKind):
            msg = (
                f"MetricFamily '{name}': kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM, got {kind!r}"
            )
            raise TritonModelException(msg)
        try:
            scope.registry.add_family(name, description, kind)
        except MetricError as exc:
            raise TritonModelException(str(exc)) from None
        self.name = name
        self.kind = kind
        self.scope = scope
        scope.track(self, scope.registry.drop_family, name)

    def Metric(
        self, labels: Mapping[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        return Metric(self, labels or {}, buckets)


class Metric:
    """One metric of a family: one label set."""

    def __init__(
        self, family: MetricFamily, labels: Mapping[str, str], buckets: Sequence[float] | None
    ) -> None:
        try:
            key: Labels = family.scope.registry.add_metric(family.name, labels, buckets)
        except MetricError as exc:
            raise TritonModelException(str(exc)) from None
        self._family = family  # the family lives at least as long as its metrics
        self._key = key
        family.scope.track(self, family.scope.registry.drop_metric, family.name, key)

    def _call(self, action: str, value: float | None = None) -> float:
        registry, name = self._family.scope.registry, self._family.name
        try:
            if action == "value":
                return registry.value(name, self._key)
            getattr(registry, action)(name, self._key, float(value if value is not None else 0.0))
        except MetricError as exc:
            raise TritonModelException(str(exc)) from None
        return 0.0

    def increment(self, value: float) -> None:
        self._call("increment", value)

    def set(self, value: float) -> None:
        self._call("set", value)

    def observe(self, value: float) -> None:
        self._call("observe", value)

    def value(self) -> float:
        return self._call("value")
