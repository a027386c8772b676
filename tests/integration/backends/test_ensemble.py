"""Ensemble scheduling served by ``sonic serve``.

``pre_net`` (Python preprocessing, then the TorchScript network) must give what its two steps
give when called one by one through the client. ``diamond`` has two independent steps that
rendezvous at a barrier and report (``A_MET``, ``B_MET``) whether they met the other step there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.integration


def test_ensemble_equals_steps_called_one_by_one(infer: Callable[..., dict[str, npt.NDArray[Any]]]) -> None:
    rng = np.random.default_rng(20)
    raw = rng.normal(size=(6, 8)).astype(np.float32)
    bias = rng.normal(size=(6, 3)).astype(np.float32)
    served = infer("pre_net", {"RAW": raw, "BIAS": bias})
    scaled = infer("scale", {"RAW": raw}, ["SCALED"])["SCALED"]
    stepwise = infer("torch_script", {"INPUT__0": scaled, "INPUT__1": bias})
    # Same arrays through the same models; only the batches the step models run may differ.
    np.testing.assert_allclose(served["PROB"], stepwise["OUTPUT__0"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(served["SUM"], stepwise["OUTPUT__1"], rtol=1e-5, atol=1e-6)


def test_independent_steps_run_concurrently(infer: Callable[..., dict[str, npt.NDArray[Any]]]) -> None:
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    served = infer("diamond", {"X": x})
    # Each step was inside its model's execute while the other one was: they ran at the same time.
    np.testing.assert_array_equal(served["A_MET"], np.ones((2, 1), np.int32))
    np.testing.assert_array_equal(served["B_MET"], np.ones((2, 1), np.int32))
    np.testing.assert_array_equal(served["A"], x * 2.0)
    np.testing.assert_array_equal(served["B"], x * -3.0)


def test_step_error_names_ensemble_step_and_keeps_status(
    infer: Callable[..., dict[str, npt.NDArray[Any]]],
) -> None:
    raw = np.full((1, 8), np.nan, dtype=np.float32)
    bias = np.zeros((1, 3), dtype=np.float32)
    with pytest.raises(
        InferenceServerException, match=r"ensemble 'pre_net' step 0 \(model 'scale'\)"
    ) as error:
        infer("pre_net", {"RAW": raw, "BIAS": bias})
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "RAW holds NaN" in error.value.message()
