"""Admission control (SuperSONIC's rule): over the load threshold new clients are refused, admitted
clients keep working and nothing in flight is dropped."""

from __future__ import annotations

import queue
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration


def _batching_inputs(module, batch: int = 1) -> list[object]:  # type: ignore[no-untyped-def]
    tensor = module.InferInput("INPUT0", [batch, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((batch, 16), np.float32))
    return [tensor]


def test_new_clients_refused_over_threshold(test_repository: Path) -> None:
    # "batching" waits up to 100 ms to fill a batch: a lone request queues ~100,000 us, far over 1,000 us.
    args = ["--http-port", "0", "--admission-queue-threshold-us", "1000"]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        early = grpcclient.InferenceServerClient(process.grpc_address)
        early_http = httpclient.InferenceServerClient(process.http_address)
        # gRPC shares one connection between channels of a process; a local subchannel pool gives this
        # client a connection of its own, as a separate client process would have.
        late = grpcclient.InferenceServerClient(
            process.grpc_address, channel_args=[("grpc.use_local_subchannel_pool", 1)]
        )
        try:
            assert early.get_model_repository_index()  # under threshold: admitted
            assert early_http.get_model_metadata("batching")["name"] == "batching"
            early.infer("batching", _batching_inputs(grpcclient))  # this pushes the load metric over

            # A request of an admitted client in flight while new clients are turned away.
            done: queue.Queue[object] = queue.Queue()
            early.async_infer(
                "batching",
                _batching_inputs(grpcclient, 2),
                callback=lambda result, error: done.put(error or result),
            )
            with pytest.raises(InferenceServerException) as info:
                late.get_server_metadata()
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert "load threshold" in info.value.message()
            assert "new client refused" in info.value.message()
            with pytest.raises(InferenceServerException) as info:
                late.get_model_repository_index()
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert late.is_server_ready()  # health probes are never refused

            outcome = done.get(timeout=30)
            assert not isinstance(outcome, InferenceServerException), outcome
            np.testing.assert_array_equal(outcome.as_numpy("OUTPUT0"), np.ones((2, 16), np.float32))  # type: ignore[attr-defined]

            # Admitted clients keep inferring; their RepositoryIndex is refused like everyone's.
            early.infer("batching", _batching_inputs(grpcclient))
            early_http.infer("batching", _batching_inputs(httpclient))
            with pytest.raises(InferenceServerException) as info:
                early.get_model_repository_index()
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            request = urllib.request.Request(f"http://{process.http_address}/v2", method="GET")
            with pytest.raises(urllib.error.HTTPError) as http_info:
                urllib.request.urlopen(request, timeout=10)  # a new HTTP connection: a new client
            assert http_info.value.code == 503
            assert "load threshold" in http_info.value.read().decode()
        finally:
            for client in (early, early_http, late):
                client.close()
