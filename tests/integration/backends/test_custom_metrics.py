"""Custom metrics of Python models (``pb_utils.MetricFamily``, Triton's L0_backend_python custom_metrics):
counters, gauges and histograms a model updates are exported at ``/metrics``, and go when the model goes."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.integration.http.conftest import parse_metrics
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration

# The model's configuration: FP32 [1] in, the same and the request count out.
TENSOR = '{{ name: "{}" data_type: TYPE_FP32 dims: [ 1 ] }}'
CONFIG = (
    f'name: "counted" backend: "python" max_batch_size: 0 input [ {TENSOR.format("INPUT")} ] '
    f"output [ {TENSOR.format('OUTPUT')}, {TENSOR.format('COUNT')} ]"
)


def _infer(client: grpcclient.InferenceServerClient, value: float) -> float:
    tensor = grpcclient.InferInput("INPUT", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
    return float(client.infer("counted", [tensor]).as_numpy("COUNT")[0])


def test_a_models_metrics_are_exported_and_go_with_it(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    (repo / "counted" / "1").mkdir(parents=True)
    (repo / "counted" / "config.pbtxt").write_text(CONFIG)
    source = Path(__file__).parent / "python_models" / "counted.py"
    (repo / "counted" / "1" / "model.py").write_bytes(source.read_bytes())
    args = ["--metrics-port", "0", "--model-control-mode", "explicit", "--load-model", "counted"]
    with (
        ServerProcess.start([repo], extra_args=args) as server,
        grpcclient.InferenceServerClient(server.grpc_address) as client,
    ):
        assert [_infer(client, value) for value in (0.5, 5.0, 50.0)] == [1.0, 2.0, 3.0]
        with pytest.raises(
            InferenceServerException, match="counter 'counted_requests' cannot be decremented"
        ):
            _infer(client, -1.0)
        with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=10) as response:
            samples, types = parse_metrics(response.read().decode())
        client.unload_model("counted")
        with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=10) as response:
            after_unload = response.read().decode()
    labels = frozenset({("model", "counted")})
    assert (types["counted_requests"], types["counted_last_value"], types["counted_values"]) == (
        "counter",
        "gauge",
        "histogram",
    )
    assert samples[("counted_requests", labels)] == 3.0
    assert samples[("counted_last_value", labels)] == 50.0
    buckets = {
        le: samples[("counted_values_bucket", labels | {("le", le)})] for le in ("1.0", "10.0", "+Inf")
    }
    assert buckets == {"1.0": 1.0, "10.0": 2.0, "+Inf": 3.0}
    assert samples[("counted_values_sum", labels)] == 55.5
    assert samples[("counted_values_count", labels)] == 3.0
    assert "counted_requests" not in after_unload  # the model's metrics went with it
