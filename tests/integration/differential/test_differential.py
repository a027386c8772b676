"""sonic against real Triton 2.51: the same generated requests to both, the same answers expected.

Each case is sent to Triton and to sonic (gRPC as serialized bytes, HTTP as raw requests) and their
outcomes are compared: status, error message and the normalised answer. A difference fails the test
unless a row of ``intended.INTENDED`` (mirrored in docs/triton-differences.md) explains it.

CI runs a fixed, seeded number of examples per test. ``SONIC_DIFFERENTIAL_EXAMPLES=N`` runs N examples
per test with fresh random seeds instead (a longer run for people); ``SONIC_DIFFERENTIAL_REPORT=PATH``
appends every unexplained difference to PATH as JSON lines instead of stopping at the first.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest
import tritonclient.utils.shared_memory as shm
from hypothesis import given
from hypothesis import strategies as st
from tests.integration.differential.calls import Call
from tests.integration.differential.compare import Both, budget
from tests.integration.differential.requests import InferCase, infer_grpc, infer_http
from tests.integration.differential.single_faults import FAULTS, single_fault_calls
from tests.integration.differential.strategies import (
    SequenceCase,
    control_cases,
    infer_cases,
    log_settings_cases,
    malformed_calls,
    metadata_calls,
    raw_calls,
    sequence_cases,
    sequence_request,
    shm_cases,
    trace_settings_cases,
    wrong_method_calls,
)

pytestmark = [pytest.mark.integration, pytest.mark.triton]

SHM_BYTES = 8192  # two pages: an offset of one page is valid on both servers


@pytest.fixture(scope="module")
def shm_key() -> Iterator[str]:
    key = f"/sonic_differential_{os.getpid():08d}"  # one length: replays match
    handle = shm.create_shared_memory_region("differential", key, SHM_BYTES)
    try:
        yield key
    finally:
        shm.destroy_shared_memory_region(handle)


@pytest.fixture(scope="module")
def sequence_numbers() -> Iterator[int]:
    return itertools.count(1000)


@budget(60)
@given(case=infer_cases(), binary=st.booleans())
def test_infer(both: Both, case: InferCase, binary: bool) -> None:
    both.compare(infer_grpc(case))
    both.compare(infer_http(case, binary_output=binary))


@pytest.mark.parametrize("fault", FAULTS)
@budget(6)
@given(data=st.data())
def test_single_fault(both: Both, fault: str, data: st.DataObject) -> None:
    # One fault: the message is compared, not only the status (two faults may be named in either order).
    both.compare(data.draw(single_fault_calls(fault=fault)))


@budget(30)
@given(call=raw_calls())
def test_raw_binary(both: Both, call: Call) -> None:
    both.compare(call)


@budget(25)
@given(case=sequence_cases())
def test_sequences(both: Both, sequence_numbers: Iterator[int], case: SequenceCase) -> None:
    # One sequence after the other, never interleaved: the model has one slot, and a second sequence
    # would wait for it (until the first ENDs or expires), timing that the two servers need not share.
    number = next(sequence_numbers)
    for step in range(len(case.steps)):
        both.compare(infer_grpc(sequence_request(case, number, step)))
    number = next(sequence_numbers)
    for step in range(len(case.steps)):
        both.compare(infer_http(sequence_request(case, number, step), binary_output=False))


@budget(5)  # each load starts a Python-backend stub on Triton: seconds apiece
@given(calls=control_cases())
def test_model_control(both: Both, calls: list[Call]) -> None:
    for call in calls:
        both.compare(call)


@budget(25)
@given(data=st.data())
def test_shared_memory(both: Both, shm_key: str, data: st.DataObject) -> None:
    for call in data.draw(shm_cases(shm_key, SHM_BYTES)):
        both.compare(call)


@budget(30)
@given(call=metadata_calls())
def test_metadata(both: Both, call: Call) -> None:
    both.compare(call)


@budget(20)
@given(call=wrong_method_calls())
def test_wrong_method(both: Both, call: Call) -> None:
    both.compare(call)


@budget(40)
@given(call=malformed_calls())
def test_malformed(both: Both, call: Call) -> None:
    both.compare(call)


@budget(30)
@given(calls=log_settings_cases())
def test_log_settings(both: Both, calls: list[Call]) -> None:
    for call in calls:
        both.compare(call)


@budget(30)
@given(calls=trace_settings_cases())
def test_trace_settings(both: Both, calls: list[Call]) -> None:
    for call in calls:
        both.compare(call)
