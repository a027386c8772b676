"""Statistics and Prometheus metrics.

:mod:`.stats` keeps per model-version statistics in the shape of Triton's statistics extension;
:mod:`.prometheus` renders them with Triton's metric names and labels at scrape time; :mod:`.custom` holds the
metric families Python models define (``pb_utils.MetricFamily``), exported beside them.
"""
