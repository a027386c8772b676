"""Triton's trace extension.

:mod:`.config` reads the command line (``--trace-config`` and the deprecated ``--trace-*``); :mod:`.settings`
holds the global and per-model settings, their sampling counters and the settings API's changes;
:mod:`.requests` decides which requests are traced and keeps each traced request's record; :mod:`.files`
writes the trace files on a thread of their own; :mod:`.otel` makes OpenTelemetry mode's spans and
exports them with the OpenTelemetry SDK's OTLP/HTTP exporter.
"""
