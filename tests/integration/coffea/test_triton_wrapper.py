"""sonic.coffea.triton_wrapper against `sonic serve`, next to coffea's own wrapper on the same server.

Events are coffea NanoEvents read from a small NanoAOD-like ROOT file written here with uproot;
the model is a tiny dense network over each jet's (pt, eta, phi).
"""

from __future__ import annotations

import pickle
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("coffea")
pytest.importorskip("dask_awkward")

import awkward as ak
import tritonclient.grpc
import uproot
from coffea.ml_tools import triton_wrapper as coffea_triton_wrapper
from coffea.nanoevents import NanoAODSchema, NanoEventsFactory
from onnx import TensorProto, helper, numpy_helper

from sonic.coffea import triton_wrapper
from sonic.launch import ServerProcess
from sonic.models.simple import save_graph

pytestmark = [pytest.mark.integration]

EVENTS = 300
PREFERRED = 16
MAX_BATCH = 64
CONFIGS = {
    # Our auto-complete writes `dynamic_batching { }`: coffea's wrapper needs an explicit batch_size there.
    "jetnet": f"max_batch_size: {MAX_BATCH}\ndynamic_batching {{ }}\n",
    "jetnet_pref": f"max_batch_size: {MAX_BATCH}\ndynamic_batching {{ preferred_batch_size: [{PREFERRED}] }}\n",
}


class JetsOnly(NanoAODSchema):  # type: ignore[misc]
    warn_missing_crossrefs = False  # the file has jets only, none of NanoAOD's other collections


def write_model(path: Path) -> None:
    """features FP32 [-1, 3] -> score FP32 [-1, 2] = softmax(tanh(x W1 + b1) W2 + b2)."""
    rng = np.random.default_rng(7)
    weights = {
        "w1": rng.normal(0, 0.5, (3, 8)), "b1": rng.normal(0, 0.1, 8),
        "w2": rng.normal(0, 0.5, (8, 2)), "b2": rng.normal(0, 0.1, 2),
    }  # fmt: skip
    nodes = [
        helper.make_node("MatMul", ["features", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Tanh", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
        helper.make_node("Add", ["h3", "b2"], ["h4"]),
        helper.make_node("Softmax", ["h4"], ["score"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "jetnet",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    save_graph(graph, path)


def write_nanoaod(path: Path) -> Path:
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 7, size=EVENTS)
    jets = rng.normal(size=(int(counts.sum()), 4)).astype(np.float32)
    fields = {
        "pt": np.exp(3 + jets[:, 0]),
        "eta": jets[:, 1],
        "phi": jets[:, 2],
        "mass": np.exp(1 + jets[:, 3]),
    }
    data = {
        "Jet": ak.unflatten(ak.zip(fields), counts),
        "run": np.ones(EVENTS, dtype=np.uint32),
        "luminosityBlock": np.ones(EVENTS, dtype=np.uint32),
        "event": np.arange(EVENTS, dtype=np.uint64),
    }
    with uproot.recreate(path) as file:
        types = {k: v.type if isinstance(v, ak.Array) else v.dtype for k, v in data.items()}
        file.mktree("Events", types, counter_name=lambda c: f"n{c}", field_name=lambda o, i: f"{o}_{i}")
        file["Events"].extend(data)
    return path


class SonicJetScore(triton_wrapper):
    """What an analyst writes: jets' features flattened into one array, scores back per event."""

    def prepare_awkward(self, jets: Any) -> tuple[list[Any], dict[str, Any]]:
        lib = self.get_awkward_lib(jets)
        flat = lib.flatten(jets)
        features = lib.concatenate(
            [flat.pt[:, np.newaxis], flat.eta[:, np.newaxis], flat.phi[:, np.newaxis]], axis=1
        )
        return [], {"output_list": ["score"], "input_dict": {"features": features}}

    def postprocess_awkward(self, ret: Any, jets: Any) -> Any:
        lib = self.get_awkward_lib(jets)
        return lib.unflatten(ret["score"], lib.num(jets, axis=1))


class CoffeaJetScore(coffea_triton_wrapper):  # type: ignore[misc]
    prepare_awkward = SonicJetScore.prepare_awkward
    postprocess_awkward = SonicJetScore.postprocess_awkward


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("coffea-models")
    for name, config in CONFIGS.items():
        write_model(root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "onnxruntime_onnx"\n{config}')
    with ServerProcess.start([root]) as process:
        yield process.grpc_address


@pytest.fixture(scope="module")
def nanoaod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_nanoaod(tmp_path_factory.mktemp("nanoaod") / "nano.root")


def url(address: str, model: str) -> str:
    return f"triton+grpc://{address}/{model}/1"


def rows_inferred(address: str, model: str) -> int:
    with tritonclient.grpc.InferenceServerClient(address) as client:
        stats = client.get_inference_statistics(model, "1", as_json=True)
    return int(stats["model_stats"][0].get("inference_count", 0))


def test_eager_outputs_equal_coffeas_and_are_not_padded(server: str, nanoaod: Path) -> None:
    events = NanoEventsFactory.from_root(
        {str(nanoaod): "Events"}, schemaclass=JetsOnly, mode="eager"
    ).events()
    jets = int(ak.sum(ak.num(events.Jet)))
    theirs = CoffeaJetScore(url(server, "jetnet_pref"), {"ssl": False}, batch_size=PREFERRED)
    before = rows_inferred(server, "jetnet_pref")
    expected = theirs(events.Jet)
    padded = rows_inferred(server, "jetnet_pref") - before
    ours = SonicJetScore(url(server, "jetnet_pref"), {"ssl": False})
    got = ours(events.Jet)
    assert ours.batch_size == PREFERRED  # the server's preferred batch size
    assert rows_inferred(server, "jetnet_pref") - before - padded == jets  # split, never padded
    assert padded == -(-jets // PREFERRED) * PREFERRED
    assert ak.to_list(ak.num(got)) == ak.to_list(ak.num(events.Jet))
    assert np.array_equal(ak.to_numpy(ak.flatten(got)), ak.to_numpy(ak.flatten(expected)))
    ours.close()


# dask-awkward's unflatten cannot know that the counts come from the same partitions, and says so.
@pytest.mark.filterwarnings("ignore:Please ensure that dask.awkward:UserWarning")
def test_lazy_outputs_equal_coffeas_and_eager(server: str, nanoaod: Path) -> None:
    files = {str(nanoaod): "Events"}
    lazy = NanoEventsFactory.from_root(files, schemaclass=JetsOnly, mode="dask").events()
    ours = SonicJetScore(url(server, "jetnet_pref"), {"ssl": False})
    theirs = CoffeaJetScore(url(server, "jetnet_pref"), {"ssl": False}, batch_size=PREFERRED)
    got, expected = ours(lazy.Jet).compute(), theirs(lazy.Jet).compute()
    eager = NanoEventsFactory.from_root(files, schemaclass=JetsOnly, mode="eager").events()
    assert ak.to_list(got) == ak.to_list(expected) == ak.to_list(ours(eager.Jet))


def test_empty_dynamic_batching_uses_max_batch_size(server: str, nanoaod: Path) -> None:
    events = NanoEventsFactory.from_root(
        {str(nanoaod): "Events"}, schemaclass=JetsOnly, mode="eager"
    ).events()
    # coffea 2026.9 reads preferred_batch_size (a KeyError without it); the server fills it with
    # [max_batch_size] for `dynamic_batching { }`, as Triton does, so coffea's own wrapper works too.
    theirs = CoffeaJetScore(url(server, "jetnet"), {"ssl": False})(events.Jet)
    ours = SonicJetScore(url(server, "jetnet"), {"ssl": False})
    before = rows_inferred(server, "jetnet")
    scores = ours(events.Jet)
    assert ak.to_list(scores) == ak.to_list(theirs)
    assert ours.batch_size == MAX_BATCH
    assert rows_inferred(server, "jetnet") - before == int(ak.sum(ak.num(events.Jet)))
    assert np.allclose(ak.to_numpy(ak.flatten(ak.sum(scores, axis=-1))), 1.0)  # softmax rows sum to 1


@pytest.fixture
def unused_port() -> int:
    """A port nothing listens on (bound, then released: connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_pickles_as_configuration_and_fails_over(server: str, nanoaod: Path, unused_port: int) -> None:
    events = NanoEventsFactory.from_root(
        {str(nanoaod): "Events"}, schemaclass=JetsOnly, mode="eager"
    ).events()
    # The first server listed does not answer: the config query and every request go to the second.
    address = f"127.0.0.1:{unused_port},{server}"
    ours = SonicJetScore(f"triton+grpc://{address}/jetnet_pref/1", {"ssl": False, "allowed_tries": 3})
    first = ours(events.Jet)
    copy = pickle.loads(pickle.dumps(ours))
    assert copy._client is None  # configuration only; connects on first use
    assert ak.to_list(copy(events.Jet)) == ak.to_list(first)
    ours.close()
    copy.close()


@pytest.mark.parametrize(
    ("model_url", "client_args", "message"),
    [
        ("triton+http://127.0.0.1:8000/m/1", None, "protocol 'triton\\+http' is not supported"),
        ("triton+grpc://127.0.0.1:8001/m", None, "expected triton\\+grpc://host:port/model/version"),
        ("triton+grpc://127.0.0.1:8001/m/1", {"retries": 3}, "client_args \\['retries'\\] not understood"),
    ],
)
def test_bad_configuration_is_named(model_url: str, client_args: dict[str, Any] | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SonicJetScore(model_url, client_args)
