"""Prometheus metrics: Triton's names and labels; counters move by exactly what was sent."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def _identity_inputs(module, batch: int) -> list[object]:  # type: ignore[no-untyped-def]
    tensor = module.InferInput("INPUT0", [batch, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((batch, 16), np.float32))
    return [tensor]


def test_counters_move_by_what_was_sent(
    http_server: ServerProcess, scrape: Callable[[ServerProcess], Samples]
) -> None:
    labels = {"model": "add_sub", "version": "1"}
    before = scrape(http_server)
    http = httpclient.InferenceServerClient(http_server.http_address)
    grpc = grpcclient.InferenceServerClient(http_server.grpc_address)
    sent = 0
    try:
        for batch, module, client in ((1, httpclient, http), (3, grpcclient, grpc), (5, httpclient, http)):
            inputs = []
            for name in ("INPUT0", "INPUT1"):
                tensor = module.InferInput(name, [batch, 16], "INT32")
                tensor.set_data_from_numpy(np.zeros((batch, 16), np.int32))
                inputs.append(tensor)
            client.infer("add_sub", inputs)
            sent += batch
        bad = httpclient.InferInput("INPUT0", [1, 15], "INT32")
        bad.set_data_from_numpy(np.zeros((1, 15), np.int32))
        with pytest.raises(InferenceServerException):
            http.infer("add_sub", [bad])
    finally:
        http.close()
        grpc.close()
    after = scrape(http_server)

    def delta(name: str, **extra: str) -> float:
        return _value(after, name, **labels, **extra) - _value(before, name, **labels, **extra)

    assert delta("nv_inference_request_success") == 3
    assert delta("nv_inference_count") == sent
    assert delta("nv_inference_exec_count") == 3  # add_sub has no dynamic batcher: one execution each
    # Refused by validation before it reached the model: Triton 2.51 counts it nowhere either.
    assert delta("nv_inference_request_failure", reason="OTHER") == 0
    assert delta("nv_inference_request_failure", reason="BACKEND") == 0
    assert delta("sonic_inference_request_duration_us_count") == 3
    assert delta("sonic_inference_request_duration_us_bucket", le="+Inf") == 3
    assert delta("sonic_inference_queue_duration_us_count") == 3
    for name in (
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
    ):
        assert delta(name) > 0, name
    assert _value(after, "nv_inference_pending_request_count", **labels) == 0
    # Counters agree with the statistics extension: they are rendered from the same numbers.
    stats = httpclient.InferenceServerClient(http_server.http_address).get_inference_statistics("add_sub")
    entry = stats["model_stats"][0]
    assert (
        _value(after, "nv_inference_request_success", **labels)
        == entry["inference_stats"]["success"]["count"]
    )
    assert _value(after, "nv_inference_exec_count", **labels) == entry["execution_count"]
    assert _value(after, "nv_inference_request_duration_us", **labels) == (
        entry["inference_stats"]["success"]["ns"] // 1000
    )


def test_names_labels_and_types(
    http_server: ServerProcess, prometheus_parser: Callable[[str], tuple[Samples, dict[str, str]]]
) -> None:
    with urllib.request.urlopen(f"http://{http_server.metrics_address}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples, types = prometheus_parser(text)
    for name in (
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert types[name] == "counter", name
    assert types["nv_inference_pending_request_count"] == "gauge"
    assert types["nv_cpu_utilization"] == "gauge"
    assert types["sonic_inference_request_duration_us"] == "histogram"
    label_sets = {labels for (name, labels) in samples if name == "nv_inference_count"}
    assert frozenset({("model", "add_sub"), ("version", "1")}) in label_sets
    assert frozenset({("model", "versions"), ("version", "2")}) in label_sets
    reasons = {dict(labels)["reason"] for (name, labels) in samples if name == "nv_inference_request_failure"}
    assert reasons == {"REJECTED", "CANCELED", "BACKEND", "OTHER"}
    assert 0.0 <= samples[("nv_cpu_utilization", frozenset())] <= 1.0
    assert (
        samples[("nv_cpu_memory_used_bytes", frozenset())]
        < samples[("nv_cpu_memory_total_bytes", frozenset())]
    )
    # Histogram buckets are cumulative and end at +Inf == _count.
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in samples.items()
        if name == "sonic_inference_request_duration_us_bucket" and dict(labels)["model"] == "add_sub"
    )
    counts = [value for _, value in buckets]
    assert counts == sorted(counts)
    count = samples[
        ("sonic_inference_request_duration_us_count", frozenset({("model", "add_sub"), ("version", "1")}))
    ]
    assert counts[-1] == count


def test_histograms_can_be_turned_off(
    test_repository: Path, scrape: Callable[[ServerProcess], Samples]
) -> None:
    args = ["--http-port", "0", "--metrics-port", "0", "--no-metrics-histograms"]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        client = httpclient.InferenceServerClient(process.http_address)
        client.infer("identity", _identity_inputs(httpclient, 2))
        client.close()
        samples = scrape(process)
    assert _value(samples, "nv_inference_count", model="identity", version="1") == 2
    assert not any(name.startswith("sonic_inference") for name, _ in samples)
