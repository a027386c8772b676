"""Trees backend: XGBoost, LightGBM and scikit-learn models, in the role of Triton's FIL backend.

Also registered as ``fil``, so FIL model repositories load unchanged. Predictions are the
libraries' own (``Booster.inplace_predict``, ``lightgbm.Booster.predict``, ``predict_proba``),
on CPU; GPU instances of these models run on CPU too.

Config ``parameters``, as FIL names them:

- ``model_type``: ``xgboost`` (legacy binary), ``xgboost_json``, ``xgboost_ubj``, ``lightgbm``
  (text), plus ``sklearn`` (pickle/joblib) and ``skops``. When absent it follows the model file's
  suffix. FIL's ``treelite_checkpoint`` is refused: save the model in its library's format.
- ``output_class`` (default ``false``): classifiers answer the class index (binary: probability
  of class 1 above ``threshold``, default 0.5).
- ``predict_proba`` (default ``false``): classifiers answer one probability per class.
- Otherwise: binary classifiers answer the probability of class 1, multi-class ones a probability
  per class, regressors their prediction.
- ``thread_count`` (ours): prediction threads for XGBoost and LightGBM (0: the library's default).
- ``skops_trusted_types`` (ours): comma-separated types a ``.skops`` file may contain beyond those
  skops trusts by default. Pickles run code when loaded: serve only pickles you trust.

Input ``input__0`` FP32 [features]; output ``output__0`` FP32, as FIL. Auto-complete fills both
from the model file (number of features and classes).
"""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InternalError, InvalidArgumentError, ModelConfigError
from sonic.protocol.model_config import complete_from_signature, default_max_batch_size
from sonic.server.backends.base import Backend, InstanceContext
from sonic.server.backends.signature import ModelSignature, TensorInfo, check_config

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'sonic-inference[trees]'"

DEFAULT_FILES = {
    "xgboost": "xgboost.model",
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "sklearn": "model.pkl",
    "skops": "model.skops",
}
_SUFFIX_TYPES = {
    ".model": "xgboost",
    ".json": "xgboost_json",
    ".ubj": "xgboost_ubj",
    ".txt": "lightgbm",
    ".pkl": "sklearn",
    ".pickle": "sklearn",
    ".joblib": "sklearn",
    ".skops": "skops",
}

Predict = Callable[[npt.NDArray[np.float32]], npt.NDArray[Any]]


@dataclass(frozen=True)
class TreeModel:
    """A loaded model: its library prediction and what auto-complete needs."""

    predict: Predict  # probabilities (classifiers) or values (regressors), shape [n] or [n, k]
    num_features: int
    num_classes: int  # 0: regressor
    can_predict_proba: bool = True


def _require(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise ModelConfigError(f"the trees backend needs {module} for this model: {INSTALL_HINT}") from None


def _load_xgboost(path: Path, threads: int) -> TreeModel:
    xgboost = _require("xgboost")
    booster = xgboost.Booster()
    booster.load_model(str(path))
    if threads:
        booster.set_param({"nthread": threads})
    learner = json.loads(booster.save_config())["learner"]
    objective = learner["objective"]["name"]
    num_class = int(learner["learner_model_param"].get("num_class", "0"))
    classes = num_class if num_class > 1 else (2 if objective.startswith("binary:") else 0)
    return TreeModel(
        predict=lambda x: np.asarray(booster.inplace_predict(x)),
        num_features=int(booster.num_features()),
        num_classes=classes,
        # multi:softmax predicts class indices, not probabilities.
        can_predict_proba=objective != "multi:softmax",
    )


def _load_lightgbm(path: Path, threads: int) -> TreeModel:
    lightgbm = _require("lightgbm")
    booster = lightgbm.Booster(model_file=str(path))
    objective = str(booster.dump_model(num_iteration=1).get("objective", ""))
    per_iteration = int(booster.num_model_per_iteration())
    if objective.startswith(("multiclass", "multiclassova")):
        classes = per_iteration
    elif objective.startswith(("binary", "cross_entropy")):
        classes = 2
    else:
        classes = 0
    options = {"num_threads": threads} if threads else {}
    return TreeModel(
        predict=lambda x: np.asarray(booster.predict(x, **options)),
        num_features=int(booster.num_feature()),
        num_classes=classes,
    )


def _load_sklearn(path: Path, model_type: str, trusted: Sequence[str]) -> TreeModel:
    _require("sklearn")
    if model_type == "skops":
        skops_io = _require("skops.io").io
        untrusted = [t for t in skops_io.get_untrusted_types(file=str(path)) if t not in trusted]
        if untrusted:
            raise ModelConfigError(
                f"{path}: the skops file holds types that are not trusted: {untrusted}; if you trust them, "
                "list them in the config parameter skops_trusted_types (comma-separated)"
            )
        model = skops_io.load(str(path), trusted=list(trusted) or None)
    elif path.suffix == ".joblib":
        model = _require("joblib").load(path)
    else:
        with path.open("rb") as handle:
            model = pickle.load(handle)  # noqa: S301  (the operator's own model repository, documented)
    if not hasattr(model, "n_features_in_"):
        raise ModelConfigError(f"{path}: {type(model).__name__} is not a fitted scikit-learn estimator")
    if hasattr(model, "classes_") and hasattr(model, "predict_proba"):
        classes = np.asarray(model.classes_)
        return TreeModel(
            predict=lambda x: np.asarray(model.predict_proba(x)),
            num_features=int(model.n_features_in_),
            num_classes=len(classes),
        )
    return TreeModel(
        predict=lambda x: np.asarray(model.predict(x)), num_features=int(model.n_features_in_), num_classes=0
    )


def load_tree_model(
    path: Path, model_type: str, *, threads: int = 0, trusted: Sequence[str] = ()
) -> TreeModel:
    if model_type == "treelite_checkpoint":
        raise ModelConfigError(
            f"{path}: treelite checkpoints are not supported; save the model in its library's own format "
            "(XGBoost JSON/UBJSON, LightGBM text, scikit-learn pickle or skops)"
        )
    if model_type not in DEFAULT_FILES:
        raise ModelConfigError(
            f"{path}: model_type '{model_type}', expected one of {', '.join(DEFAULT_FILES)}"
        )
    if not path.is_file():
        raise ModelConfigError(f"{path}: model file does not exist")
    try:
        if model_type.startswith("xgboost"):
            return _load_xgboost(path, threads)
        if model_type == "lightgbm":
            return _load_lightgbm(path, threads)
        return _load_sklearn(path, model_type, trusted)
    except ModelConfigError:
        raise
    except Exception as exc:  # noqa: BLE001  (each library raises its own types for bad files)
        raise ModelConfigError(f"{path}: cannot load {model_type} model: {exc}") from None


@dataclass(frozen=True)
class OutputMode:
    output_class: bool = False
    predict_proba: bool = False
    threshold: float = 0.5

    def width(self, num_classes: int) -> int:
        """Values per sample: the output's dims."""
        if self.predict_proba or (num_classes > 2 and not self.output_class):
            return max(num_classes, 1)
        return 1

    def finish(self, raw: npt.NDArray[Any], num_classes: int) -> npt.NDArray[np.float32]:
        """FIL's outputs from the library's prediction ``raw``."""
        rows = raw.shape[0]
        if num_classes == 0:
            return raw.reshape(rows, -1).astype(np.float32, copy=False)
        if raw.ndim == 1 and num_classes == 2:  # binary libraries give P(class 1) only
            positive = raw
            proba = np.stack([1 - raw, raw], axis=1)
        else:
            proba = raw.reshape(rows, -1)
            positive = proba[:, -1]
        if self.predict_proba:
            result = proba
        elif self.output_class:
            classes = positive > self.threshold if num_classes == 2 else np.argmax(proba, axis=1)
            result = classes.reshape(rows, 1)
        else:
            result = positive.reshape(rows, 1) if num_classes == 2 else proba
        return np.asarray(result, dtype=np.float32)


def _parameter(config: model_config_pb2.ModelConfig, key: str) -> str | None:
    return str(config.parameters[key].string_value) if key in config.parameters else None


def _flag(where: str, key: str, value: str | None) -> bool:
    if value is None:
        return False
    if value.lower() not in {"true", "false", "1", "0"}:
        raise ModelConfigError(f"{where}: parameter {key} is '{value}', expected true or false")
    return value.lower() in {"true", "1"}


def output_mode(where: str, get: Callable[[str], str | None]) -> OutputMode:
    threshold = get("threshold") or "0.5"
    try:
        value = float(threshold)
    except ValueError:
        raise ModelConfigError(f"{where}: parameter threshold is '{threshold}', expected a number") from None
    return OutputMode(
        output_class=_flag(where, "output_class", get("output_class")),
        predict_proba=_flag(where, "predict_proba", get("predict_proba")),
        threshold=value,
    )


def _choose_file(config: model_config_pb2.ModelConfig, version_dir: Path) -> tuple[str, str]:
    """(file name, model_type) from the config, else from the one model file in the version folder."""
    model_type = _parameter(config, "model_type")
    filename = config.default_model_filename
    if not filename and model_type:
        filename = DEFAULT_FILES.get(model_type, "")
    if not filename:
        found = sorted(p.name for p in version_dir.glob("*") if p.suffix in _SUFFIX_TYPES)
        if len(found) != 1:
            raise ModelConfigError(
                f"model '{config.name}': set parameters model_type or default_model_filename; "
                f"{version_dir} holds {found or 'no'} tree model files"
            )
        filename = found[0]
    if not model_type:
        model_type = _SUFFIX_TYPES.get(Path(filename).suffix, "")
        if not model_type:
            raise ModelConfigError(
                f"model '{config.name}': cannot tell the model type of '{filename}' from its suffix; "
                f"set parameters model_type (one of {', '.join(DEFAULT_FILES)})"
            )
    return filename, model_type


class TreesBackend(Backend):
    name: ClassVar[str] = "trees"
    default_filename: ClassVar[str] = "xgboost.json"

    @classmethod
    def model_filename(cls, config: model_config_pb2.ModelConfig, version_dir: Path) -> str:
        return _choose_file(config, version_dir)[0]

    @classmethod
    def complete_config(
        cls, config: model_config_pb2.ModelConfig, model_path: Path, options: Mapping[str, str]
    ) -> None:
        # model_path: the file model_filename chose, through the server's path choke point.
        filename, model_type = _choose_file(config, model_path.parent)
        config.default_model_filename = filename
        config.parameters["model_type"].string_value = model_type
        if config.input and config.output:
            return
        where = f"model '{config.name}'"
        model = load_tree_model(
            model_path,
            model_type,
            trusted=_trusted(_parameter(config, "skops_trusted_types")),
        )
        mode = output_mode(where, lambda key: _parameter(config, key))
        complete_from_signature(
            config,
            [("input__0", model_config_pb2.TYPE_FP32, [-1, model.num_features])],
            [("output__0", model_config_pb2.TYPE_FP32, [-1, mode.width(model.num_classes)])],
            default_max_batch_size(cls.name, options),
        )

    def __init__(self, context: InstanceContext) -> None:
        config = context.config
        self._where = where = f"model '{config.name}'"
        if len(config.output) != 1:
            raise ModelConfigError(f"{where}: the trees backend takes one input and gives one output")
        _, model_type = _choose_file(config, context.version_dir)
        threads = context.parameter("thread_count") or "0"
        if not threads.isdigit():
            raise ModelConfigError(
                f"{where}: parameter thread_count is '{threads}', expected an integer >= 0"
            )
        self._model = load_tree_model(
            context.model_path,
            model_type,
            threads=int(threads),
            trusted=_trusted(context.parameter("skops_trusted_types")),
        )
        self._mode = output_mode(where, context.parameter)
        if self._mode.predict_proba and not self._model.can_predict_proba:
            raise ModelConfigError(f"{where}: predict_proba is set, but the model gives no probabilities")
        if (self._mode.predict_proba or self._mode.output_class) and self._model.num_classes == 0:
            raise ModelConfigError(
                f"{where}: output_class/predict_proba are set, but the model is a regressor"
            )
        # The configuration against the model at load, as Triton's backends check theirs: one FP32 input of
        # the model's features and one FP32 output of its values per sample (any names, as FIL).
        width = self._mode.width(self._model.num_classes)
        check_config(
            config,
            ModelSignature(
                [
                    TensorInfo(t.name, model_config_pb2.TYPE_FP32, (-1, self._model.num_features))
                    for t in config.input[:1]
                ],
                [TensorInfo(config.output[0].name, model_config_pb2.TYPE_FP32, (-1, width))],
            ),
        )
        self._input = config.input[0].name
        self._output = config.output[0].name
        if context.device_kind == "gpu":
            log.info(
                "%s: the trees backend predicts on CPU; GPU instance %s runs on CPU",
                where,
                context.instance_name,
            )

    @property
    def runs_on_any_thread(self) -> bool:
        """Prediction with a loaded model (XGBoost, LightGBM, scikit-learn) binds nothing to a thread."""
        return True

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        features = inputs[self._input]
        if features.ndim != 2:
            raise InvalidArgumentError(
                f"{self._where}: input '{self._input}' must be [batch, features], got shape {list(features.shape)}"
            )
        try:
            raw = self._model.predict(features)
        except Exception as exc:  # noqa: BLE001  (fails this batch only)
            raise InternalError(f"{self._where}: prediction failed: {exc}") from None
        result = self._mode.finish(raw, self._model.num_classes)
        return {name: result for name in output_names if name == self._output}


def _trusted(value: str | None) -> list[str]:
    return [t.strip() for t in (value or "").split(",") if t.strip()]


class FilBackend(TreesBackend):
    """The same backend under Triton's FIL name (``backend: "fil"``)."""

    name: ClassVar[str] = "fil"
    default_filename: ClassVar[str] = "xgboost.model"
