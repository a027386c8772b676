"""Model folders that fail to load, each in one way: what an admin's load call meets in a repository.

Each :class:`Faulty` is one broken ``config.pbtxt`` or ``model.py`` beside a valid rest (a one-input
Python echo model), so a load of it is a single fault: of the configuration's text or its name, of a
tensor, of batching, of sequence-batcher controls, of instance groups, of the version policy (or no version
folder), or of the Python model's code (import, class, ``auto_complete_config``, ``initialize``).
``DECOUPLED`` is a valid decoupled model (its requests through the unary calls are refused), ``BLS`` a
valid model whose BLS request to it is refused (no ``decoupled=True``). Triton 2.51 and sonic load the same
folders (tests/integration/differential/test_reach.py).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from tests.integration.differential.repository import ECHO_MODEL

IO = (
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "OUT_X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
)
ECHO = textwrap.dedent(ECHO_MODEL).lstrip()
COMPLETION_FAILS = (
    ECHO
    + """
    @staticmethod
    def auto_complete_config(config):
        raise ValueError("completion fails on purpose")
"""
)
INITIALIZE_FAILS = """class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("initialize fails on purpose")

    def execute(self, requests):
        return []
"""


@dataclass(frozen=True)
class Faulty:
    name: str
    config: str  # the config.pbtxt after name and backend ("" for the default: max_batch_size 0, IO)
    source: str = ECHO  # version 1's model.py
    config_name: str = ""  # the name the config gives ("" for the folder's)

    def config_text(self) -> str:
        body = self.config or f"max_batch_size: 0\n{IO}"
        return f'name: "{self.config_name or self.name}"\nbackend: "python"\n{body}'


def _reshaped(dims: str, shape: str) -> str:
    return (
        f'max_batch_size: 0\ninput [ {{ name: "X" data_type: TYPE_FP32 dims: [ {dims} ] '
        f"reshape {{ shape: [ {shape} ] }} }} ]\n"
        'output [ { name: "OUT_X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    )


def _sequence(controls: str) -> str:
    return f"max_batch_size: 4\n{IO}sequence_batching {{ control_input [ {controls} ] }}\n"


FAULTY = (
    Faulty("unparsable", "max_batch_size: [ 0\n"),
    Faulty("other_name", "", config_name="not_its_folder"),
    Faulty("negative_batch", f"max_batch_size: -1\n{IO}"),
    Faulty("unknown_platform", ""),  # its platform replaces the backend below
    Faulty("input_no_name", f"max_batch_size: 0\n{IO}input [ {{ data_type: TYPE_FP32 dims: [ 1 ] }} ]\n"),
    Faulty("input_no_datatype", f'max_batch_size: 0\n{IO}input [ {{ name: "Y" dims: [ 1 ] }} ]\n'),
    Faulty(
        "input_zero_dim",
        f'max_batch_size: 0\n{IO}input [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 0 ] }} ]\n',
    ),
    Faulty(
        "preferred_too_big", f"max_batch_size: 4\n{IO}dynamic_batching {{ preferred_batch_size: [ 8 ] }}\n"
    ),
    Faulty("gpu_group", f"max_batch_size: 0\n{IO}instance_group [ {{ kind: KIND_GPU count: 1 }} ]\n"),
    Faulty("policy_missing", f"max_batch_size: 0\n{IO}version_policy {{ specific {{ versions: [ 2 ] }} }}\n"),
    Faulty(
        "corrid_no_datatype", _sequence('{ name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID } ] }')
    ),
    Faulty(
        "control_one_value",
        _sequence('{ name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 1 ] } ] }'),
    ),
    Faulty("control_no_values", _sequence('{ name: "START" control [ { kind: CONTROL_SEQUENCE_START } ] }')),
    Faulty("import_fails", "", source="import no_such_module_for_sonic\n"),
    Faulty("no_model_class", "", source="class Other:\n    pass\n"),
    Faulty("completion_fails", "", source=COMPLETION_FAILS),
    Faulty("initialize_fails", "", source=INITIALIZE_FAILS),
    # Configurations Triton 2.51 loads and sonic refuses (intended row config-refused-at-load).
    Faulty(
        "input_twice", f'max_batch_size: 0\n{IO}input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]\n'
    ),
    Faulty("dynamic_unbatched", f"max_batch_size: 0\n{IO}dynamic_batching {{ }}\n"),
    Faulty("negative_count", f"max_batch_size: 0\n{IO}instance_group [ {{ kind: KIND_CPU count: -1 }} ]\n"),
    Faulty(
        "output_twice",
        f'max_batch_size: 0\n{IO}output [ {{ name: "OUT_X" data_type: TYPE_FP32 dims: [ 1 ] }} ]\n',
    ),
    Faulty("no_version", ""),  # its folder holds no version folder
    Faulty("reshape_trunks", _reshaped("-1", "2, -1")),
    Faulty("reshape_variables", _reshaped("-1, -1", "-1")),
    Faulty("reshape_zero", _reshaped("1", "0")),
    Faulty("reshape_size", _reshaped("4", "3")),
    Faulty(
        "input_datatype_number",
        f'max_batch_size: 0\n{IO}input [ {{ name: "Y" data_type: 99 dims: [ 1 ] }} ]\n',
    ),
)
DECOUPLED = Faulty("decoupled", f"max_batch_size: 0\n{IO}model_transaction_policy {{ decoupled: true }}\n")
# A valid model whose execute sends a BLS request to the decoupled model without ``decoupled=True``.
BLS_TO_DECOUPLED = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inner = pb_utils.InferenceRequest(
                model_name="decoupled",
                requested_output_names=["OUT_X"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "X")],
            ).exec()
            if inner.has_error():
                responses.append(pb_utils.InferenceResponse(error=inner.error()))
            else:
                responses.append(pb_utils.InferenceResponse(inner.output_tensors()))
        return responses
"""
BLS = Faulty("bls_decoupled", "", source=BLS_TO_DECOUPLED)
# A model whose execute fails in the way its first request's X asks for (MISBEHAVIOURS).
MISBEHAVES_SOURCE = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        how = int(pb_utils.get_input_tensor_by_name(requests[0], "X").as_numpy()[0])
        if how == 1:
            raise pb_utils.TritonModelException("refused on purpose")
        if how == 2:
            raise ValueError("fails on purpose")
        if how == 3:
            return []
        if how == 4:
            return ["not a response" for _ in requests]
        if how == 5:
            return [pb_utils.InferenceResponse([]) for _ in requests]
        tensor = pb_utils.Tensor("OUT_X", np.zeros(3, np.float32))
        return [pb_utils.InferenceResponse([tensor]) for _ in requests]
"""
MISBEHAVES = Faulty("misbehaves", "", source=MISBEHAVES_SOURCE)
MISBEHAVIOURS = {
    1: "raises TritonModelException",
    2: "raises ValueError",
    3: "returns no responses",
    4: "returns a str",
    5: "returns no outputs",
    6: "returns an output of other dims",
}
DECOUPLED_RAISES = Faulty(
    "decoupled_raises",
    DECOUPLED.config,
    source="class TritonPythonModel:\n    def execute(self, requests):\n        raise ValueError('on purpose')\n",
)
TEXT_ECHO = Faulty(  # dims [ -1 ]: a raw binary request to it is refused (a BYTES input must be [1])
    "text_echo",
    'max_batch_size: 0\ninput [ { name: "X" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    'output [ { name: "OUT_X" data_type: TYPE_STRING dims: [ -1 ] } ]\n',
)
TYPED = Faulty(
    "typed",
    "max_batch_size: 0\n"
    + "".join(
        f'input [ {{ name: "{n}" data_type: TYPE_{t} dims: [ 1 ] }} ]\n'
        f'output [ {{ name: "OUT_{n}" data_type: TYPE_{t} dims: [ 1 ] }} ]\n'
        for n, t in (("B", "BOOL"), ("I", "INT32"), ("F", "FP32"))
    ),
)
# A model of one input with two variable dims (Triton cannot deduce a raw binary request's shape) and a
# BYTES output its execute fills as the first element of X asks: 7, numbers; 8, a BLS request whose
# input is complex64 (no KServe v2 datatype); else X and OUT_S left out.
MATRIX_SOURCE = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            how = int(x.reshape(-1)[0]) if x.size else 0
            tensors = [pb_utils.Tensor("OUT_X", x)]
            if how == 7:
                tensors.append(pb_utils.Tensor("OUT_S", np.zeros(1, np.float32)))
            elif how == 8:
                inner = pb_utils.InferenceRequest(
                    model_name="spare",
                    requested_output_names=["OUT_X"],
                    inputs=[pb_utils.Tensor("X", np.zeros(2, np.complex64))],
                ).exec()
                if inner.has_error():
                    responses.append(pb_utils.InferenceResponse(error=inner.error()))
                    continue
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
"""
MATRIX = Faulty(
    "matrix",
    'max_batch_size: 0\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
    'output [ { name: "OUT_X" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
    'output [ { name: "OUT_S" data_type: TYPE_STRING dims: [ -1 ] } ]\n',
    source=MATRIX_SOURCE,
)
VALID = (DECOUPLED, BLS, MISBEHAVES, DECOUPLED_RAISES, TEXT_ECHO, TYPED, MATRIX)  # load at start


def write_faulty(root: Path, models: tuple[Faulty, ...] = (*FAULTY, *VALID)) -> None:
    """Each model's folder under ``root``: its config and version 1's model.py."""
    for model in models:
        (root / model.name / "1").mkdir(parents=True)
        text = model.config_text()
        if model.name == "unknown_platform":
            text = text.replace('backend: "python"', 'platform: "no_such_platform"')
        (root / model.name / "config.pbtxt").write_text(text, encoding="utf-8")
        (root / model.name / "1" / "model.py").write_text(model.source, encoding="utf-8")
        if model.name == "no_version":
            (root / model.name / "1" / "model.py").rename(root / model.name / "model.py")
            (root / model.name / "1").rmdir()
