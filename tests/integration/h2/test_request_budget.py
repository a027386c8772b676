"""Slow large uploads against the request-buffer budget: a real `sonic serve` with a 64 MiB budget.

Unfinished uploads over HTTP/1.1 (huge Content-Length, bytes until the server stops reading) and over
HTTP/2 (ModelInfer streams sending as fast as flow control allows) must not push the server's resident
memory past the budget plus a stated margin (docs/security.md, "Memory budgets and back-pressure"):
per HTTP/2 connection its 16 MiB connection window, per HTTP/1.1 connection one read. Small calls are
still answered meanwhile, every byte is released once the uploaders go, and an upload that cannot get
room within the bound is answered (503 + Retry-After, RESOURCE_EXHAUSTED) instead of waiting forever.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sonic.h2.limits import SERVER_CONNECTION_WINDOW_BYTES
from sonic.launch import ServerProcess
from sonic.testing import h2attacks
from sonic.testing.h2attacks import Bystander

from .conftest import CALL_BOUND_S, MiB, rss_bytes

BUDGET = 64 * MiB
WAIT_S = 10  # long enough for the uploads to stay parked while memory is measured
# What the process may grow by besides the buffered bytes themselves: allocator slack, the sockets'
# and aiohttp's buffers, numpy's and Python's own (measured growth with no uploads at all: ~10 MiB).
SLACK = 40 * MiB
HTTP_UPLOADS = 8
HTTP_READ = 1 * MiB  # the most one HTTP/1.1 read can add past the budget
GRPC_CONNECTIONS = 3
SMALL_JSON = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]}
).encode()


def budget_in_use(process: ServerProcess) -> tuple[int, int]:
    """(sonic_request_buffer_bytes, sonic_request_buffer_capacity_bytes) from the metrics endpoint."""
    with urllib.request.urlopen(f"http://{process.metrics_address}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    values = dict(line.split(" ", 1) for line in lines if line.startswith("sonic_request_buffer_"))
    return int(values["sonic_request_buffer_bytes"]), int(values["sonic_request_buffer_capacity_bytes"])


def released(process: ServerProcess, bound_s: float = WAIT_S + 15) -> int:
    """The bytes in use once the uploaders' connections closed (bounded wait). An HTTP/1.1 upload
    paused for lack of room is not read, so its close is seen only when its wait ends (``WAIT_S``)."""
    deadline = time.monotonic() + bound_s
    in_use, _ = budget_in_use(process)
    while in_use and time.monotonic() < deadline:
        time.sleep(0.2)  # the closes reach the server's loop asynchronously; the metric says when
        in_use, _ = budget_in_use(process)
    return in_use


def start(repository: Path, wait_s: float) -> ServerProcess:
    args = ["--http-port", "0", "--metrics-port", "0", "--request-buffer-budget-mb", str(BUDGET // MiB)]
    return ServerProcess.start([repository], extra_args=[*args, "--request-buffer-wait-secs", str(wait_s)])


@pytest.fixture
def budgeted(small_repository: Path) -> Iterator[ServerProcess]:
    process = start(small_repository, wait_s=WAIT_S)
    try:
        yield process
    finally:
        process.stop(timeout_s=10)


@pytest.fixture
def impatient(small_repository: Path) -> Iterator[ServerProcess]:
    process = start(small_repository, wait_s=1)
    try:
        yield process
    finally:
        process.stop(timeout_s=10)


def test_slow_http_uploads_stay_within_the_budget(budgeted: ServerProcess) -> None:
    address = budgeted.http_address
    before = rss_bytes(budgeted.pid)
    # 8 x 48 MiB announced (the old server allocated that up front: 384 MiB), 256 MiB offered.
    with h2attacks.http_slow_uploads(address, HTTP_UPLOADS, announced=48 * MiB, offered=32 * MiB) as uploads:
        grown = rss_bytes(budgeted.pid) - before
        in_use, capacity = budget_in_use(budgeted)
        assert capacity == BUDGET
        assert sum(uploads.sent) < HTTP_UPLOADS * 32 * MiB, "no upload was held back"
        assert BUDGET <= in_use <= BUDGET + HTTP_UPLOADS * HTTP_READ, in_use
        bound = BUDGET + HTTP_UPLOADS * HTTP_READ + SLACK
        assert grown < bound, f"server RSS grew by {grown / MiB:.0f} MiB (bound {bound / MiB:.0f} MiB)"
        # Meanwhile a small request (one read) is served, and gRPC calls too.
        assert h2attacks.http_post(address, SMALL_JSON)[0] == 200
        Bystander(budgeted.grpc_address, CALL_BOUND_S).call()
    assert released(budgeted) == 0
    assert h2attacks.http_post(address, SMALL_JSON)[0] == 200
    # A body larger than the whole budget could never be held: refused before it is read.
    response = h2attacks.http_content_length(address, 1 << 30)
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert b"request buffer budget" in response


def test_slow_grpc_uploads_stay_within_the_budget(budgeted: ServerProcess) -> None:
    before = rss_bytes(budgeted.pid)
    # 3 connections x 4 calls announcing 60 MiB each: 720 MiB offered (the old 1 GiB windows took it all).
    with h2attacks.grpc_slow_uploads(budgeted.grpc_address, GRPC_CONNECTIONS, 4, 60 * MiB) as uploads:
        grown = rss_bytes(budgeted.pid) - before
        in_use, _ = budget_in_use(budgeted)
        margin = GRPC_CONNECTIONS * SERVER_CONNECTION_WINDOW_BYTES
        assert BUDGET <= sum(uploads.sent) <= BUDGET + margin, uploads.sent
        assert in_use <= BUDGET + margin, in_use
        bound = BUDGET + margin + SLACK
        assert grown < bound, f"server RSS grew by {grown / MiB:.0f} MiB (bound {bound / MiB:.0f} MiB)"
        Bystander(budgeted.grpc_address, CALL_BOUND_S).call()  # a new connection's small call: answered
        assert h2attacks.http_post(budgeted.http_address, SMALL_JSON)[0] == 200
    assert released(budgeted) == 0
    Bystander(budgeted.grpc_address, CALL_BOUND_S).call()


def test_uploads_that_wait_past_the_bound_are_answered(impatient: ServerProcess) -> None:
    """Two unfinished uploads of 48 MiB cannot both fit in 64 MiB: the one left waiting for room is
    answered after the 1 s bound (503 + Retry-After over HTTP, RESOURCE_EXHAUSTED over gRPC) and gives
    back what it held; nothing waits forever."""
    address = impatient.http_address
    with h2attacks.http_slow_uploads(address, 2, announced=48 * MiB, offered=47 * MiB) as uploads:
        answers = [answer for answer in uploads.http_answers() if answer]
        assert answers, "no upload was answered"
        head, _, body = answers[0].partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503"), answers[0][:200]
        assert b"Retry-After: 1" in head
        assert "request buffer budget" in json.loads(body)["error"]
    assert released(impatient) == 0
    with h2attacks.grpc_slow_uploads(impatient.grpc_address, 2, 1, 48 * MiB) as uploads:
        statuses = list(uploads.grpc_statuses.values())
        assert statuses, "no call was ended"
        assert all(code == 8 and "request buffer budget" in message for code, message in statuses), statuses
    assert released(impatient) == 0
    assert h2attacks.http_post(address, SMALL_JSON)[0] == 200
