"""``sonic validate``'s comparison math: ULP distance, NaN and signed zeros, tolerances per output, the
fraction allowed outside, exact types, statuses, arg-max agreement and the bounded sample."""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from sonic.validate.compare import (
    NO_ANSWER,
    SAMPLE_ELEMENTS,
    Answer,
    ModelStats,
    OutputStats,
    RequestInfo,
    Tensor,
    Tolerance,
    Tolerances,
    argmax_agreement,
    compare_answers,
    float_differences,
    statuses_agree,
    ulp_distance,
)

pytestmark = pytest.mark.unit

INFO = RequestInfo(0, "r0", 1_700_000_000_000_000_000)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16])
def test_ulp_distance_counts_representable_values_through_zero(dtype: type) -> None:
    one: np.ndarray[Any, Any] = np.array([1.0], dtype=dtype)
    up = np.nextafter(one.astype(np.float64), 2).astype(dtype) if dtype is ml_dtypes.bfloat16 else None
    if up is None or up[0] == one[0]:  # bfloat16 has no nextafter: step its bits
        up = (one.view(f"<i{one.itemsize}") + 1).view(dtype)
    assert ulp_distance(one, up).tolist() == [1.0]
    assert ulp_distance(up, one).tolist() == [1.0]
    tiny: np.ndarray[Any, Any] = (np.zeros(1, dtype=dtype).view(f"<i{one.itemsize}") + 1).view(
        dtype
    )  # smallest subnormal
    # -tiny to +tiny: two steps, through the one value zero (-0.0 and +0.0 are the same value).
    assert ulp_distance(-tiny, tiny).tolist() == [2.0]
    assert ulp_distance(np.array([-0.0], dtype=dtype), np.array([0.0], dtype=dtype)).tolist() == [0.0]
    assert ulp_distance(np.array([-0.0], dtype=dtype), tiny).tolist() == [1.0]


def test_ulp_distance_of_nans_and_infinities() -> None:
    a = np.array([np.nan, np.nan, 1.0, np.inf, np.finfo(np.float32).max], dtype=np.float32)
    b = np.array([np.nan, 1.0, np.nan, np.inf, np.inf], dtype=np.float32)
    assert ulp_distance(a, b).tolist() == [0.0, math.inf, math.inf, 0.0, 1.0]


def test_ulp_distance_across_the_whole_fp64_range_does_not_wrap() -> None:
    big = np.array([np.finfo(np.float64).max])
    distance = ulp_distance(-big, big)[0]
    assert distance == pytest.approx(2.0 * 0x7FEFFFFFFFFFFFFF)  # no int64 overflow to a small number


def test_ulp_distance_needs_one_float_type() -> None:
    with pytest.raises(TypeError, match="one float type"):
        ulp_distance(np.zeros(1, np.float32), np.zeros(1, np.float64))
    with pytest.raises(TypeError, match="one float type"):
        ulp_distance(np.zeros(1, np.int32), np.zeros(1, np.int32))


def test_nan_equals_nan_and_signed_zeros_agree_under_exact_tolerance() -> None:
    r = np.array([np.nan, 0.0, -np.inf, 1.0], dtype=np.float32)
    c = np.array([np.nan, -0.0, -np.inf, 1.0], dtype=np.float32)
    found = float_differences(r, c, Tolerance())
    assert not found.outside.any()
    assert found.absolute.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert found.ulp.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_nan_against_a_number_and_opposite_infinities_are_outside_any_tolerance() -> None:
    r = np.array([np.nan, 1.0, np.inf], dtype=np.float32)
    c = np.array([1.0, np.nan, -np.inf], dtype=np.float32)
    found = float_differences(r, c, Tolerance(atol=1e30, rtol=1.0, max_ulp=10))
    assert found.outside.tolist() == [True, True, True]
    assert found.absolute.tolist() == [math.inf] * 3
    assert found.relative.tolist() == [math.inf] * 3


def test_absolute_relative_and_ulp_criteria_each_admit_an_element() -> None:
    r = np.array([1.0, 100.0, 0.0], dtype=np.float32)
    c = np.array([1.001, 100.5, 1e-7], dtype=np.float32)
    assert float_differences(r, c, Tolerance()).outside.tolist() == [True, True, True]
    assert float_differences(r, c, Tolerance(atol=2e-3)).outside.tolist() == [False, True, False]
    assert float_differences(r, c, Tolerance(rtol=6e-3)).outside.tolist() == [False, False, True]
    # The relative error of a difference from an exact zero is infinite.
    assert float_differences(r, c, Tolerance()).relative[2] == math.inf
    # 1.001 is 8389 float32 steps above 1.0: within 10 000 ULP, beyond 8 000.
    assert float_differences(r, c, Tolerance(max_ulp=10_000)).outside.tolist()[0] is False
    assert float_differences(r, c, Tolerance(max_ulp=8_000)).outside.tolist()[0] is True


def test_bad_tolerances_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        Tolerance(atol=-1.0)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        Tolerance(allowed_fraction=1.5)


def test_per_output_tolerances_model_qualified_first() -> None:
    loose, looser = Tolerance(atol=1e-3), Tolerance(atol=1e-1)
    tolerances = Tolerances(Tolerance(), {"OUT": loose, "m/OUT": looser})
    assert tolerances.of("m", "OUT") is looser
    assert tolerances.of("other", "OUT") is loose
    assert tolerances.of("m", "SCORES") == Tolerance()
    assert tolerances.key_for("m", "SCORES") is None


def _answer(**outputs: np.ndarray) -> Answer:  # type: ignore[type-arg]
    names = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64", np.dtype(np.object_): "BYTES"}
    tensors = {k: Tensor(names[v.dtype], v.shape, v) for k, v in outputs.items()}
    return Answer("OK", 200, outputs=tensors)


def test_each_output_is_held_to_its_own_tolerance_and_fraction() -> None:
    base = np.linspace(0.0, 1.0, 100, dtype=np.float32).reshape(1, 100)
    shifted = base.copy()
    shifted[0, :3] += 0.01  # three elements of a hundred moved by 0.01
    tolerances = Tolerances(
        Tolerance(atol=1e-3),
        {"loose": Tolerance(atol=0.1), "fraction": Tolerance(atol=1e-3, allowed_fraction=0.05)},
    )
    stats = ModelStats("m")
    reference = _answer(strict=base, loose=base, fraction=base)
    candidate = _answer(strict=shifted, loose=shifted, fraction=shifted)
    compare_answers(stats, INFO, reference, candidate, tolerances)
    assert not stats.outputs["strict"].passed
    assert stats.outputs["strict"].elements_outside == 3
    assert stats.outputs["loose"].passed
    assert stats.outputs["fraction"].passed  # 3 % outside, 5 % allowed
    assert stats.outputs["fraction"].fraction_outside == pytest.approx(0.03)
    assert stats.outputs["strict"].max_abs == pytest.approx(0.01, rel=1e-3)
    assert not stats.passed


def test_integers_and_bytes_compare_exactly_whatever_the_tolerance() -> None:
    tolerances = Tolerances(Tolerance(atol=10.0, allowed_fraction=1.0))
    stats = ModelStats("m")
    reference = _answer(ids=np.array([1, 2, 3]), text=np.array([b"a", b"b"], dtype=np.object_))
    candidate = _answer(ids=np.array([1, 2, 4]), text=np.array([b"a", b"c"], dtype=np.object_))
    compare_answers(stats, INFO, reference, candidate, tolerances)
    assert not stats.outputs["ids"].passed
    assert "1 elements differ; first at 2: 4, reference 3" in stats.outputs["ids"].examples[0][1]
    assert not stats.outputs["text"].passed
    same = ModelStats("m")
    compare_answers(same, INFO, reference, reference, tolerances)
    assert same.passed


def test_structure_differences_fail_the_output() -> None:
    stats = ModelStats("m")
    reference = _answer(a=np.zeros((2, 3), np.float32), b=np.zeros(2, np.float32))
    candidate = _answer(a=np.zeros((3, 2), np.float32), c=np.zeros(2, np.float32))
    compare_answers(stats, INFO, reference, candidate, Tolerances(Tolerance(atol=1.0)))
    assert "shape [3, 2], reference [2, 3]" in stats.outputs["a"].examples[0][1]
    assert "missing from the candidate" in stats.outputs["b"].examples[0][1]
    assert "in the candidate's answer only" in stats.outputs["c (candidate only)"].examples[0][1]
    assert not stats.passed


def test_renamed_outputs_are_compared_under_the_candidates_name() -> None:
    stats = ModelStats("m")
    values = np.ones((1, 4), np.float32)
    compare_answers(
        stats, INFO, _answer(out=values), _answer(OUTPUT__0=values), Tolerances(), {"out": "OUTPUT__0"}
    )
    assert list(stats.outputs) == ["out"]
    assert stats.passed


def test_statuses_and_messages_must_match() -> None:
    error = Answer("INVALID_ARGUMENT", 400, "bad input")
    assert statuses_agree(error, Answer("INVALID_ARGUMENT", 400, "bad input"))
    assert not statuses_agree(error, Answer("INVALID_ARGUMENT", 400, "other words"))
    assert not statuses_agree(error, Answer("NOT_FOUND", 404, "bad input"))
    # Across protocols the HTTP status each maps to.
    assert statuses_agree(error, Answer("HTTP 400", 400, "bad input"))
    assert not statuses_agree(error, Answer("HTTP 404", 404, "bad input"))
    stats = ModelStats("m")
    compare_answers(stats, INFO, error, error, Tolerances())
    assert stats.both_failed == 1
    assert stats.passed
    compare_answers(stats, INFO, error, _answer(x=np.zeros(1, np.float32)), Tolerances())
    assert stats.status_mismatches == 1
    assert "reference INVALID_ARGUMENT: bad input; candidate OK" in stats.examples[0][1]
    assert not stats.passed


def test_a_request_without_answer_fails_even_when_both_timed_out() -> None:
    stats = ModelStats("m")
    late = Answer(NO_ANSWER, 0, "no answer within the deadline of 1 s (--timeout-s)")
    compare_answers(stats, INFO, late, late, Tolerances())
    assert stats.unanswered == 1
    assert not stats.passed


def test_argmax_agreement_of_classifier_like_outputs() -> None:
    r = np.array([[0.1, 0.9], [0.6, 0.4], [0.5, 0.2]], np.float32)
    c = np.array([[0.2, 0.8], [0.4, 0.6], [0.9, 0.0]], np.float32)
    assert argmax_agreement(r, c) == (2, 3)
    assert argmax_agreement(r[:, :1], c[:, :1]) is None  # one column: not a classifier
    assert argmax_agreement(r[0], c[0]) is None  # one dimension
    stats = ModelStats("m")
    compare_answers(stats, INFO, _answer(p=r), _answer(p=c), Tolerances(Tolerance(atol=1.0)))
    assert stats.outputs["p"].argmax_agreement == pytest.approx(2 / 3)


def test_worst_requests_are_kept_in_order_and_the_sample_stays_bounded() -> None:
    output = OutputStats("m", "x", Tolerance(atol=0.55))
    rng = np.random.default_rng(1)
    for index in range(12):
        r = rng.random((1, 20_000)).astype(np.float32)
        c = r.copy()
        c[0, 7] += index / 10
        output.add(
            RequestInfo(index, f"r{index}", index), Tensor("FP32", r.shape, r), Tensor("FP32", c.shape, c)
        )
    worst = output.worst_first()
    assert [case.request.request_id for case in worst] == ["r11", "r10", "r9", "r8", "r7"]
    assert worst[0].flat_index == 7
    assert output.sample_abs.size == SAMPLE_ELEMENTS  # 240 000 elements seen, a bounded sample kept
    assert output.median("abs") == 0.0
    assert output.elements_outside == 6  # 0.6 .. 1.1 are beyond 0.55
    assert output.max_abs == pytest.approx(1.1, rel=1e-5)
