"""BLS calls of decoupled models, cancellation and sonic's bound on unread responses, on sonic and on
real NVIDIA Triton 2.51 (the servers and models of test_decoupled_parity.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from tests.integration.backends.decoupled_servers import (
    SERVERS,
    endpoints,
    i32,
    infer_request,
    probe,
    read_message,
    stream,
    write_repository,
)
from tests.integration.triton_helpers import Endpoint
from tritonclient.grpc import service_pb2_grpc

pytestmark = [pytest.mark.integration]

BLS_NOT_DECOUPLED = (
    "Model square_int32 - Error when running inference: Model square_int32 is using the decoupled. "
    "The current BLS request call doesn't support models using the decoupled transaction policy. "
    "Please use 'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled models.'"
)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(tmp_path_factory.mktemp("decoupled"))


@pytest.fixture(scope="module", params=SERVERS)
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[Endpoint]:
    yield from endpoints(request.param, repository)


def test_cancelling_the_stream_is_seen_by_the_model(server: Endpoint) -> None:
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(iter([infer_request("decoupled_probe", "m8", probe(8))]), timeout=60)
        received = []
        for message in call:
            received.append(read_message(message))
            if len(received) == 3:
                call.cancel()
                break
    assert [m[5] for m in received] == [(i32(0),), (i32(1),), (i32(2),)]
    # Mode 9 answers once the model's thread noticed (on its next send) and noted it.
    ((*_, outputs),) = stream(server, [infer_request("decoupled_probe", "m9", probe(9))])
    notes = outputs[0][3]
    assert notes == ("cancelled=True request.is_cancelled=True final: no error",)


@pytest.mark.parametrize("mode", [0, 1])
def test_bls_iterates_over_a_decoupled_models_responses(server: Endpoint, mode: int) -> None:
    """exec(decoupled=True) (mode 0) and async_exec(decoupled=True) (mode 1): the final flag sent alone
    comes as a last, empty response."""
    for n, values in ((3, (3, 3, 3)), (0, ())):
        inputs = {"N": np.array([n], np.int32), "MODE": np.array([mode], np.int32)}
        ((*_, outputs),) = stream(server, [infer_request("bls_decoupled", "b", inputs)])
        assert outputs == (
            ("OUT", "INT32", (len(values),), values),
            ("COUNT", "INT32", (2,), (n + 1, 1)),
            ("MSG", "BYTES", (1,), ("",)),
        )


def test_bls_without_decoupled_true_gets_tritons_error(server: Endpoint) -> None:
    inputs = {"N": np.array([3], np.int32), "MODE": np.array([2], np.int32)}
    ((*_, outputs),) = stream(server, [infer_request("bls_decoupled", "b", inputs)])
    assert outputs[2] == (
        "MSG",
        "BYTES",
        (1,),
        (BLS_NOT_DECOUPLED,),
    )


def test_a_model_sending_to_a_client_that_does_not_read_is_held_back(server: Endpoint) -> None:
    """sonic's bound (docs/backends.md): the model's sender waits once 64 responses are unread and the
    front end has 4 MiB (native) or 64 responses (grpcio) queued for the client. Triton queues all.

    The model floods 2,000 responses of 64 KiB (128 MiB). grpcio's client grows its HTTP/2 window to
    64 MiB and buffers what arrives without being read; past about 32 MiB it resets the stream itself
    (PROTOCOL_ERROR, grpcio 1.85), which the model sees as a cancellation. Either way the model never
    gets to send everything, as it would into an unbounded queue."""
    if server.kind == "triton":
        pytest.skip("Triton 2.51 queues every response a decoupled model sends: no bound to check")
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(iter([infer_request("decoupled_probe", "m12", probe(12))]), timeout=60)
        first = next(call)  # the flood runs; this client reads no more
        assert read_message(first)[5][0][2] == (16384,)
        ((*_, outputs),) = stream(server, [infer_request("decoupled_probe", "m13", probe(13))])
        call.cancel()
    _, sent = outputs[0][3]
    assert 64 <= int(sent) < 1000


def test_bls_iterates_over_a_non_decoupled_models_one_response(server: Endpoint) -> None:
    inputs = {"N": np.array([7], np.int32), "MODE": np.array([3], np.int32)}
    ((*_, outputs),) = stream(server, [infer_request("bls_decoupled", "b", inputs)])
    assert outputs == (
        ("OUT", "INT32", (1,), (7,)),
        ("COUNT", "INT32", (2,), (1, 0)),
        ("MSG", "BYTES", (1,), ("leaf",)),
    )
