"""Trees backend pieces: FIL output modes, model-type checks, in-process loading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import skops.io
from sklearn.tree import DecisionTreeClassifier

from sonic.protocol.errors import ModelConfigError
from sonic.server.backends.trees import OutputMode, load_tree_model

pytestmark = pytest.mark.unit


def test_binary_modes() -> None:
    p1 = np.array([0.2, 0.7], dtype=np.float32)
    assert OutputMode().finish(p1, 2).tolist() == [[pytest.approx(0.2)], [pytest.approx(0.7)]]
    assert OutputMode(output_class=True).finish(p1, 2).tolist() == [[0.0], [1.0]]
    assert OutputMode(output_class=True, threshold=0.8).finish(p1, 2).tolist() == [[0.0], [0.0]]
    proba = OutputMode(predict_proba=True).finish(p1, 2)
    np.testing.assert_allclose(proba, [[0.8, 0.2], [0.3, 0.7]], rtol=1e-6)
    assert OutputMode(predict_proba=True).width(2) == 2
    assert OutputMode().width(2) == 1


def test_multiclass_and_regression_modes() -> None:
    proba = np.array([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]])
    assert OutputMode(output_class=True).finish(proba, 3).tolist() == [[1.0], [0.0]]
    assert OutputMode().finish(proba, 3).dtype == np.float32
    assert OutputMode().width(3) == 3
    assert OutputMode().finish(np.array([1.5, -2.0]), 0).tolist() == [[1.5], [-2.0]]


def test_treelite_and_unknown_types_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="treelite checkpoints are not supported"):
        load_tree_model(tmp_path / "checkpoint.tl", "treelite_checkpoint")
    with pytest.raises(ModelConfigError, match="model_type 'catboost', expected one of"):
        load_tree_model(tmp_path / "m.cbm", "catboost")


def test_skops_untrusted_types_named(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(20, 3)).astype(np.float32)
    model = DecisionTreeClassifier(max_depth=2, random_state=0).fit(x, x[:, 0] > 0)
    skops.io.dump(model, tmp_path / "model.skops")
    with pytest.raises(ModelConfigError, match=r"not trusted: \['sklearn.tree._tree.Tree'\]"):
        load_tree_model(tmp_path / "model.skops", "skops")
    loaded = load_tree_model(tmp_path / "model.skops", "skops", trusted=["sklearn.tree._tree.Tree"])
    assert loaded.num_features == 3
    assert loaded.num_classes == 2
    np.testing.assert_array_equal(loaded.predict(x), model.predict_proba(x))
