"""One model repository with a small model per backend, served once for all backend tests.

Models are built locally with seeded weights and generated data. The ``BuiltModels`` fixture
also hands the tests the very objects that were saved (module, boosters, estimators), so served
outputs are compared with direct in-process execution.
"""

from __future__ import annotations

import os
import pickle
import textwrap
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightgbm
import numpy as np
import pytest
import skops.io
import torch
import tritonclient.grpc as grpcclient
import xgboost
from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor

from sonic.launch import ServerProcess

FEATURES = 6
SEED = 7


def write_model(repo: Path, name: str, config: str, files: dict[str, bytes | str] | None = None) -> Path:
    model_dir = repo / name
    version = model_dir / "1"
    version.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(config).lstrip(), encoding="utf-8")
    for filename, content in (files or {}).items():
        target = version / filename
        if isinstance(content, str):
            target.write_text(textwrap.dedent(content).lstrip(), encoding="utf-8")
        else:
            target.write_bytes(content)
    return model_dir


class Net(torch.nn.Module):
    """Two inputs, two outputs: enough to check positional name mapping both ways."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(8, 16)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(torch.relu(self.hidden(x))) + bias
        return torch.softmax(logits, dim=-1), x.sum(dim=-1, keepdim=True)


def make_net() -> Net:
    torch.manual_seed(SEED)
    return Net().eval()


def build_torchscript(repo: Path, net: Net) -> None:
    example = (torch.randn(2, 8), torch.randn(2, 3))
    version = repo / "torch_script" / "1"
    version.mkdir(parents=True)
    with warnings.catch_warnings():
        # TorchScript is what Triton's pytorch_libtorch platform serves; torch 2.13 calls it deprecated.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(net, example), str(version / "model.pt"))  # type: ignore[no-untyped-call]
    # Config order differs from the index order on purpose: INPUT__1 is the second forward argument.
    write_model(
        repo,
        "torch_script",
        """
        name: "torch_script"
        platform: "pytorch_libtorch"
        max_batch_size: 16
        input [
          { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 3 ] },
          { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 8 ] }
        ]
        output [
          { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 1 ] },
          { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] }
        ]
        dynamic_batching { max_queue_delay_microseconds: 2000 }
        parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }
        """,
    )


def build_torch_export(repo: Path, net: Net) -> None:
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(
        net, (torch.randn(2, 8), torch.randn(2, 3)), dynamic_shapes={"x": {0: batch}, "bias": {0: batch}}
    )
    version = repo / "torch_export" / "1"
    version.mkdir(parents=True)
    torch.export.save(program, str(version / "model.pt2"))
    # No inputs or outputs: the config is completed from the exported program's signature.
    write_model(
        repo,
        "torch_export",
        """
        name: "torch_export"
        backend: "pytorch"
        default_model_filename: "model.pt2"
        """,
    )


ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU } ]
"""


BLS_CONFIG = """
name: "bls"
backend: "python"
max_batch_size: 16
input [ { name: "X" data_type: TYPE_FP32 dims: [ 8 ] } ]
output [ { name: "P" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


RENDEZVOUS_MODULE = """
import threading

# Two parties: the two ensemble branches. Each reports whether it met the other inside execute; a
# sequential schedule breaks the barrier after the timeout, and both then report that they did not.
BARRIER = threading.Barrier(2, timeout=20)
"""


PYTHON_MODELS = Path(__file__).parent / "python_models"


def python_model(name: str) -> dict[str, bytes | str]:
    return {"model.py": (PYTHON_MODELS / f"{name}.py").read_bytes()}


BRANCH_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 8 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_FP32 dims: [ 8 ] }},
  {{ name: "MET" data_type: TYPE_INT32 dims: [ 1 ] }}
]
parameters {{ key: "factor" value: {{ string_value: "{factor}" }} }}
"""


def tree_data(classes: int, rows: int = 400) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(SEED + classes)
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    score = x[:, 0] + 0.5 * x[:, 1] ** 2 - x[:, 2] * x[:, 3]
    if classes == 0:
        return x, score.astype(np.float32)
    edges = np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1])
    return x, np.digitize(score, edges).astype(np.int32)


@dataclass(frozen=True)
class BuiltModels:
    repo: Path
    python_path: Path  # holds sonic_test_rendezvous, for the server's PYTHONPATH
    net: Net
    xgb_binary: Any
    xgb_multi: Any
    lgbm_multi: Any
    sk_classifier: Any
    sk_regressor: Any


TREE_CONFIG = """
name: "{name}"
backend: "{backend}"
{extra}
parameters [
{parameters}
]
"""


def _tree_config(name: str, backend: str, parameters: dict[str, str], extra: str = "") -> str:
    rows = ",\n".join(f'  {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in parameters.items())
    return TREE_CONFIG.format(name=name, backend=backend, extra=extra, parameters=rows)


def build_trees(repo: Path) -> dict[str, Any]:
    built: dict[str, Any] = {}
    x, y = tree_data(2)
    xgb_binary = xgboost.train(
        {"objective": "binary:logistic", "max_depth": 3, "seed": SEED, "nthread": 1},
        xgboost.DMatrix(x, label=y),
        num_boost_round=20,
    )
    write_model(
        repo,
        "xgb_fil",
        f"""
        name: "xgb_fil"
        backend: "fil"
        max_batch_size: 1024
        input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]
        output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        dynamic_batching {{ }}
        parameters [
          {{ key: "model_type" value: {{ string_value: "xgboost_json" }} }},
          {{ key: "output_class" value: {{ string_value: "false" }} }}
        ]
        """,
    )
    xgb_binary.save_model(str(repo / "xgb_fil" / "1" / "xgboost.json"))
    built["xgb_binary"] = xgb_binary

    x, y = tree_data(3)
    xgb_multi = xgboost.train(
        {"objective": "multi:softprob", "num_class": 3, "max_depth": 3, "seed": SEED, "nthread": 1},
        xgboost.DMatrix(x, label=y),
        num_boost_round=10,
    )
    write_model(repo, "xgb_proba", _tree_config("xgb_proba", "trees", {"predict_proba": "true"}))
    xgb_multi.save_model(str(repo / "xgb_proba" / "1" / "model.ubj"))
    built["xgb_multi"] = xgb_multi

    lgbm = lightgbm.train(
        {
            "objective": "multiclass",
            "num_class": 3,
            "num_leaves": 8,
            "seed": SEED,
            "verbose": -1,
            "num_threads": 1,
        },
        lightgbm.Dataset(x, label=y),
        num_boost_round=10,
    )
    write_model(
        repo,
        "lgbm_class",
        _tree_config(
            "lgbm_class", "fil", {"model_type": "lightgbm", "output_class": "true"}, "max_batch_size: 1024"
        ),
    )
    lgbm.save_model(str(repo / "lgbm_class" / "1" / "model.txt"))
    built["lgbm_multi"] = lgbm

    classifier = GradientBoostingClassifier(n_estimators=15, max_depth=2, random_state=SEED).fit(x, y)
    write_model(
        repo,
        "sk_proba",
        _tree_config("sk_proba", "trees", {"predict_proba": "true"}, "max_batch_size: 1024"),
        {"model.pkl": pickle.dumps(classifier)},
    )
    built["sk_classifier"] = classifier

    x, target = tree_data(0)
    regressor = RandomForestRegressor(n_estimators=8, max_depth=4, random_state=SEED).fit(x, target)
    write_model(
        repo,
        "sk_skops",
        _tree_config(
            "sk_skops",
            "trees",
            # skops refuses types it does not know unless the operator trusts them by name.
            {"model_type": "skops", "skops_trusted_types": "sklearn.tree._tree.Tree"},
            "max_batch_size: 1024",
        ),
    )
    skops.io.dump(regressor, repo / "sk_skops" / "1" / "model.skops")
    built["sk_regressor"] = regressor
    return built


def build_python_and_ensembles(repo: Path) -> None:
    write_model(repo, "add_sub", ADD_SUB_CONFIG, python_model("add_sub"))
    write_model(repo, "scale", 'name: "scale"\nbackend: "python"\n', python_model("scale"))
    write_model(
        repo,
        "scale_batched",
        """
        name: "scale_batched"
        backend: "python"
        dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 5000000 }
        """,
        python_model("scale"),
    )
    write_model(repo, "bls", BLS_CONFIG, python_model("bls"))
    write_model(
        repo,
        "echo_parameters",
        """
        name: "echo_parameters"
        backend: "python"
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [
          { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] },
          { name: "SEQUENCE" data_type: TYPE_STRING dims: [ 1 ] }
        ]
        """,
        python_model("echo_parameters"),
    )
    write_model(
        repo,
        "ragged_lengths",
        """
        name: "ragged_lengths"
        backend: "python"
        max_batch_size: 8
        input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
        output [ { name: "SEEN" data_type: TYPE_FP32 dims: [ 3 ] } ]
        dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 10000000 }
        """,
        python_model("ragged_lengths"),
    )
    write_model(
        repo,
        "sequence_sum",
        """
        name: "sequence_sum"
        backend: "python"
        max_batch_size: 0
        input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [
          { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] },
          { name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] },
          { name: "CORR" data_type: TYPE_UINT64 dims: [ 1 ] }
        ]
        sequence_batching {
          direct { }
          control_input [
            { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
            { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
            { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
            { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
          ]
        }
        """,
        python_model("sequence_sum"),
    )
    write_model(
        repo,
        "state_sum",
        """
        name: "state_sum"
        backend: "python"
        max_batch_size: 0
        input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] } ]
        sequence_batching {
          direct { }
          control_input [
            { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
          ]
          state [
            {
              input_name: "SUM_IN"
              output_name: "SUM_OUT"
              data_type: TYPE_FP32
              dims: [ 1 ]
              initial_state: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "zero" }
            }
          ]
        }
        """,
        python_model("state_sum"),
    )
    write_model(
        repo,
        "bls_async",
        """
        name: "bls_async"
        backend: "python"
        max_batch_size: 16
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 8 ] } ]
        output [
          { name: "P" data_type: TYPE_FP32 dims: [ 3 ] },
          { name: "S" data_type: TYPE_FP32 dims: [ 8 ] }
        ]
        """,
        python_model("bls_async"),
    )
    write_model(
        repo,
        "chatty",
        """
        name: "chatty"
        backend: "python"
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
        """,
        python_model("chatty"),
    )
    for name, factor in (("branch_a", 2.0), ("branch_b", -3.0)):
        write_model(repo, name, BRANCH_CONFIG.format(name=name, factor=factor), python_model("branch"))
    write_model(
        repo,
        "pre_net",
        """
        name: "pre_net"
        platform: "ensemble"
        max_batch_size: 16
        input [
          { name: "RAW" data_type: TYPE_FP32 dims: [ 8 ] },
          { name: "BIAS" data_type: TYPE_FP32 dims: [ 3 ] }
        ]
        output [
          { name: "PROB" data_type: TYPE_FP32 dims: [ 3 ] },
          { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] }
        ]
        ensemble_scheduling {
          step [
            {
              model_name: "scale"
              model_version: -1
              input_map { key: "RAW" value: "RAW" }
              output_map { key: "SCALED" value: "scaled" }
            },
            {
              model_name: "torch_script"
              model_version: -1
              input_map { key: "INPUT__0" value: "scaled" }
              input_map { key: "INPUT__1" value: "BIAS" }
              output_map { key: "OUTPUT__0" value: "PROB" }
              output_map { key: "OUTPUT__1" value: "SUM" }
            }
          ]
        }
        """,
    )
    write_model(
        repo,
        "diamond",
        """
        name: "diamond"
        platform: "ensemble"
        max_batch_size: 8
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 8 ] } ]
        output [
          { name: "A" data_type: TYPE_FP32 dims: [ 8 ] },
          { name: "B" data_type: TYPE_FP32 dims: [ 8 ] },
          { name: "A_MET" data_type: TYPE_INT32 dims: [ 1 ] },
          { name: "B_MET" data_type: TYPE_INT32 dims: [ 1 ] }
        ]
        ensemble_scheduling {
          step [
            { model_name: "branch_a" model_version: -1
              input_map { key: "IN" value: "X" }
              output_map { key: "OUT" value: "A" } output_map { key: "MET" value: "A_MET" } },
            { model_name: "branch_b" model_version: -1
              input_map { key: "IN" value: "X" }
              output_map { key: "OUT" value: "B" } output_map { key: "MET" value: "B_MET" } }
          ]
        }
        """,
    )


@pytest.fixture(scope="session")
def built_models(tmp_path_factory: pytest.TempPathFactory) -> BuiltModels:
    root = tmp_path_factory.mktemp("backends")
    repo = root / "models"
    repo.mkdir()
    python_path = root / "python"
    python_path.mkdir()
    (python_path / "sonic_test_rendezvous.py").write_text(textwrap.dedent(RENDEZVOUS_MODULE))
    net = make_net()
    build_torchscript(repo, net)
    build_torch_export(repo, net)
    build_python_and_ensembles(repo)
    trees = build_trees(repo)
    return BuiltModels(repo=repo, python_path=python_path, net=net, **trees)


@pytest.fixture(scope="session")
def backend_server(built_models: BuiltModels) -> Iterator[ServerProcess]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(built_models.python_path), env.get("PYTHONPATH")) if p
    )
    with ServerProcess.start([built_models.repo], env=env, extra_args=["--http-port", "0"]) as server:
        yield server


@pytest.fixture
def client(backend_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(backend_server.grpc_address) as connection:
        yield connection


Infer = Callable[..., dict[str, np.ndarray[Any, Any]]]


@pytest.fixture
def infer(client: grpcclient.InferenceServerClient) -> Infer:
    """``infer(model, {name: array}, outputs=None)``: one request through the official client."""

    def call(
        model: str, inputs: dict[str, np.ndarray[Any, Any]], outputs: list[str] | None = None
    ) -> dict[str, np.ndarray[Any, Any]]:
        return infer_with(client, model, inputs, outputs)

    return call


def infer_with(
    client: grpcclient.InferenceServerClient,
    model: str,
    inputs: dict[str, np.ndarray[Any, Any]],
    outputs: list[str] | None = None,
) -> dict[str, np.ndarray[Any, Any]]:
    """One request through the official client; every output (or ``outputs``) as numpy."""
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), _datatype(array))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    requested = [grpcclient.InferRequestedOutput(name) for name in outputs] if outputs else None
    result = client.infer(model, tensors, outputs=requested)
    names = outputs or [o["name"] for o in result.get_response(as_json=True)["outputs"]]
    return {name: result.as_numpy(name) for name in names}


def _datatype(array: np.ndarray[Any, Any]) -> str:
    return {np.dtype(np.float32): "FP32", np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64"}[
        array.dtype
    ]
