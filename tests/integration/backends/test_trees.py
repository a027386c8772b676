"""Trees backend served by ``sonic serve``: outputs equal the libraries' own predictions, exactly.

Served predictions are computed by the same library call on the same float32 features, and tree
predictions are per row, so batching cannot change them: comparisons are exact (FIL's outputs
are FP32, so the library's float64 predictions are compared after the same cast).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
import xgboost

pytestmark = pytest.mark.integration

FEATURES = 6


def features(rows: int, seed: int) -> npt.NDArray[Any]:
    return np.random.default_rng(seed).normal(size=(rows, FEATURES)).astype(np.float32)


def test_xgboost_fil_config_binary_probability(
    built_models: Any, infer: Callable[..., dict[str, npt.NDArray[Any]]]
) -> None:
    x = features(64, 10)
    served = infer("xgb_fil", {"input__0": x})["output__0"]
    expected = built_models.xgb_binary.predict(xgboost.DMatrix(x))
    assert served.shape == (64, 1)
    np.testing.assert_array_equal(served[:, 0], expected.astype(np.float32))


def test_xgboost_ubj_predict_proba_auto_completed(
    built_models: Any,
    client: grpcclient.InferenceServerClient,
    infer: Callable[..., dict[str, npt.NDArray[Any]]],
) -> None:
    config = client.get_model_config("xgb_proba", as_json=True)["config"]
    assert config["input"][0]["name"] == "input__0"
    assert config["input"][0]["dims"] == [str(FEATURES)]
    assert config["output"][0]["dims"] == ["3"]
    assert config["parameters"]["model_type"]["string_value"] == "xgboost_ubj"
    assert config["max_batch_size"] == 4  # Triton's default for auto-completed batched models
    assert "dynamic_batching" in config
    x = features(4, 11)
    served = infer("xgb_proba", {"input__0": x})["output__0"]
    np.testing.assert_array_equal(served, built_models.xgb_multi.inplace_predict(x).astype(np.float32))


def test_lightgbm_output_class(built_models: Any, infer: Callable[..., dict[str, npt.NDArray[Any]]]) -> None:
    x = features(40, 12)
    served = infer("lgbm_class", {"input__0": x})["output__0"]
    expected = np.argmax(built_models.lgbm_multi.predict(x), axis=1)
    assert served.shape == (40, 1)
    np.testing.assert_array_equal(served[:, 0], expected.astype(np.float32))


def test_sklearn_pickle_predict_proba(
    built_models: Any, infer: Callable[..., dict[str, npt.NDArray[Any]]]
) -> None:
    x = features(30, 13)
    served = infer("sk_proba", {"input__0": x})["output__0"]
    np.testing.assert_array_equal(served, built_models.sk_classifier.predict_proba(x).astype(np.float32))


def test_sklearn_skops_regressor(
    built_models: Any, infer: Callable[..., dict[str, npt.NDArray[Any]]]
) -> None:
    x = features(30, 14)
    served = infer("sk_skops", {"input__0": x})["output__0"]
    np.testing.assert_array_equal(served[:, 0], built_models.sk_regressor.predict(x).astype(np.float32))
