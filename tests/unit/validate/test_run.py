"""One replay's scheduling, with targets in memory: in recorded order, a bounded number in flight, and a
target that never answers reported per request at its deadline."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from tests.integration.traffic.trace import record, write_records

from sonic.validate.compare import Answer, Tensor
from sonic.validate.run import ValidateConfig, validate
from sonic.validate.source import SourceConfig
from sonic.validate.targets import Call, TargetSpec

pytestmark = pytest.mark.unit

REQUESTS = 12


class Doubling:
    """Answers 2 * INPUT0, after a short wait; counts how many calls it holds at once."""

    def __init__(self, *, hang_on: frozenset[str] = frozenset(), offset: float = 0.0) -> None:
        self.hang_on, self.offset = hang_on, offset
        self.in_flight = self.most_in_flight = 0
        self.seen: list[str] = []
        self.closed = False

    async def infer(self, call: Call, timeout_s: float) -> Answer:
        self.seen.append(call.request_id)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if call.request_id in self.hang_on:
                await asyncio.Event().wait()  # never set: a hung server
            await asyncio.sleep(0.001 * (hash(call.request_id) % 5))  # answers come back out of order
            output = (2 * call.arrays["INPUT0"] + self.offset).astype(np.float32)
            return Answer("OK", 200, outputs={"OUTPUT0": Tensor("FP32", output.shape, output)})
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    records = [
        record(i * 1.0, "m", {"INPUT0": ("FP32", np.full((1, 4), i, np.float32))}, request_id=f"r{i}")
        for i in range(REQUESTS)
    ]
    write_records(tmp_path, records)
    return tmp_path


def _config(trace: Path, **kwargs: object) -> ValidateConfig:
    spec = TargetSpec.parse("127.0.0.1:1")
    return ValidateConfig(SourceConfig(trace), spec, spec, **kwargs)  # type: ignore[arg-type]


async def test_requests_go_in_order_with_a_bounded_number_in_flight(trace: Path) -> None:
    reference, candidate = Doubling(), Doubling()
    done: list[int] = []
    result = await validate(_config(trace, concurrency=3), done.append, targets=(reference, candidate))
    assert result.passed
    assert result.requests == REQUESTS
    assert done == list(range(1, REQUESTS + 1))
    assert reference.seen == candidate.seen == [f"r{i}" for i in range(REQUESTS)]
    assert 1 < reference.most_in_flight <= 3
    assert reference.closed
    assert candidate.closed
    assert result.models["m"].outputs["OUTPUT0"].elements == 4 * REQUESTS


async def test_a_difference_is_found_and_a_hung_request_reported_at_its_deadline(trace: Path) -> None:
    candidate = Doubling(hang_on=frozenset({"r3", "r7"}), offset=1e-3)
    config = _config(trace, concurrency=4, timeout_s=0.05)
    result = await asyncio.wait_for(validate(config, targets=(Doubling(), candidate)), timeout=30)
    stats = result.models["m"]
    assert stats.unanswered == 2
    assert [info.request_id for info, _ in stats.examples] == ["r3", "r7"]
    assert "no answer within the deadline of 0.05 s (--timeout-s)" in stats.examples[0][1]
    output = stats.outputs["OUTPUT0"]
    assert output.requests == REQUESTS - 2
    assert not output.passed
    assert output.max_abs == pytest.approx(1e-3, rel=1e-3)  # in float32
    assert not result.passed
