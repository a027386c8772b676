"""The model-config half of ``triton_python_backend_utils``: what ``auto_complete_config`` edits.

:class:`ModelConfig` (the object Triton hands a Python model's ``auto_complete_config``, with
Triton's checks and messages) and the helpers that read a model's config as a dict.
The top-level ``triton_python_backend_utils`` re-exports them with :mod:`sonic.server.backends.pb_utils`,
as Triton's one module has them all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    return next((t for t in model_config.get("input", []) if t["name"] == name), None)


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    return next((t for t in model_config.get("output", []) if t["name"] == name), None)


def using_decoupled_model_transaction_policy(model_config: Mapping[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class ModelConfig:
    """The config handed to ``auto_complete_config``; only batch size, I/O and scheduling change.

    ``_model_config`` keeps the name of Triton's attribute: Triton's own stub reads it after
    ``auto_complete_config`` when this module shadows Triton's copy in a shared environment.
    """

    def __init__(self, model_config: str | Mapping[str, Any]) -> None:
        self._model_config: dict[str, Any] = (
            json.loads(model_config) if isinstance(model_config, str) else dict(model_config)
        )
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._model_config["max_batch_size"])
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config function "
                f"for model '{self._name()}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but auto-complete-config "
                    f"function for model '{self._name()}' tries to set scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def _add(self, kind: str, tensor: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
        name = tensor.get("name")
        if name is None:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{self._name()}' is missing 'name' property."
            )
        for key in tensor:
            if key not in allowed:
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model '{self._name()}' contains "
                    f"property other than {', '.join(repr(k) for k in allowed)}."
                )
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model '{self._name()}' is missing "
                    f"'{key}' property."
                )
        for current in self._model_config[kind]:
            if current["name"] != name:
                continue
            declared = current.get("data_type", "TYPE_INVALID")
            if declared not in ("TYPE_INVALID", tensor["data_type"]):
                raise ValueError(
                    f"unable to load model '{self._name()}', configuration expects datatype {declared} for "
                    f"{kind} '{name}', model provides {tensor['data_type']}"
                )
            if current.get("dims") and list(current["dims"]) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{self._name()}', tensor '{name}': the model expects dims {list(tensor['dims'])} "
                    f"but the model configuration specifies dims {list(current['dims'])}"
                )
            current.update(tensor)
            return
        self._model_config[kind].append(dict(tensor))

    def add_input(self, input: Mapping[str, Any]) -> None:
        self._add("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: Mapping[str, Any]) -> None:
        self._add("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict: Mapping[str, Any]) -> None:
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    f"model transaction property in auto-complete-config function for model '{self._name()}' "
                    "contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            if "decoupled" in policy and policy["decoupled"] != transaction_policy_dict["decoupled"]:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model '{self._name()}', "
                    f"which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = transaction_policy_dict["decoupled"]
