"""The hls4ml backend: a tiny network's firmware (C simulation) served by `sonic serve`.

One g++ build of hls4ml's own project (the reference: hls4ml's ``predict``) serves the project models;
``tiny_pt`` is converted and compiled by the backend at load. Outputs must be identical to ``predict``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

hls4ml = pytest.importorskip("hls4ml")
torch = pytest.importorskip("torch")

from sonic.client import InputError, SyncClient
from sonic.client.config import ClientConfig
from sonic.launch import ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PRECISION = "ap_fixed<16,6>"
CONFIG = """name: "{name}"
backend: "hls4ml"
max_batch_size: 64
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 2 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
parameters {{ key: "hls4ml_precision" value: {{ string_value: "{precision}" }} }}
{extra}
"""


@dataclass
class Served:
    address: str
    reference: Any  # hls4ml's ModelGraph, compiled: its predict() is the reference
    cache: Path


def tiny_module() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()


def write_config(folder: Path, cache: Path, extra: str = "") -> None:
    del cache  # the cache folder is the server's option (--backend-config hls4ml,cache_dir=...)
    text = CONFIG.format(name=folder.name, precision=PRECISION, extra=extra)
    (folder / "config.pbtxt").write_text(text)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("hls4ml")
    repository, cache = root / "models", root / "cache"
    module = tiny_module()
    config = hls4ml.utils.config_from_pytorch_model(
        module, input_shape=(4,), granularity="model", default_precision=PRECISION
    )
    project = repository / "tiny" / "1" / "hls4ml_prj"
    reference = hls4ml.converters.convert_from_pytorch_model(
        module, hls_config=config, output_dir=str(project), backend="Vivado", io_type="io_parallel"
    )
    reference.compile()  # the one g++ build the project models share
    write_config(repository / "tiny", cache)
    shutil.copytree(repository / "tiny" / "1", repository / "tiny_k8" / "1")
    write_config(
        repository / "tiny_k8", cache, 'parameters { key: "kernel_batch" value: { string_value: "8" } }'
    )
    (repository / "tiny_pt" / "1").mkdir(parents=True)
    torch.save(module, repository / "tiny_pt" / "1" / "model.pt")
    write_config(repository / "tiny_pt", cache)
    with ServerProcess.start(
        [repository], extra_args=["--backend-config", f"hls4ml,cache_dir={cache}"]
    ) as server:
        yield Served(server.grpc_address, reference, cache)


def inputs(rows: int, seed: int) -> npt.NDArray[np.float32]:
    return np.random.default_rng(seed).normal(0, 2, size=(rows, 4)).astype(np.float32)


def predict(reference: Any, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return np.asarray(reference.predict(np.ascontiguousarray(x))).reshape(len(x), 2)


@pytest.mark.parametrize("model", ["tiny", "tiny_k8", "tiny_pt"])
def test_outputs_identical_to_hls4ml_predict(served: Served, model: str) -> None:
    x = inputs(37, seed=1)  # not a multiple of the kernel batch: the last one is padded
    with SyncClient(model, ClientConfig(servers=(served.address,))) as client:
        got = client.infer({"x": x})["y"]
    expected = predict(served.reference, x)
    assert got.dtype == np.float32
    assert np.array_equal(got, expected)
    float_model = tiny_module()(torch.from_numpy(x)).detach().numpy()
    assert 0 < np.abs(got - float_model).max() < 0.05  # fixed point: close to the float model, not equal


def test_concurrent_requests_are_batched_and_split_back(served: Served) -> None:
    requests = [{"x": inputs(rows, seed=rows)} for rows in (1, 5, 12, 3, 30)]
    with SyncClient("tiny_k8", ClientConfig(servers=(served.address,))) as client:
        results = client.infer_ragged(requests)
    for request, result in zip(requests, results, strict=True):
        assert np.array_equal(result["y"], predict(served.reference, request["x"]))


def test_compiled_once_per_content(served: Served) -> None:
    # tiny and tiny_k8 hold the same project: one cache entry; tiny_pt's conversion is another.
    entries = sorted(p.name for p in served.cache.iterdir())
    assert len(entries) == 2, entries
    assert all((served.cache / e / "library.so").is_file() for e in entries)


def test_wrong_shape_is_rejected_with_the_models_name(served: Served) -> None:
    with (
        SyncClient("tiny", ClientConfig(servers=(served.address,))) as client,
        pytest.raises(InputError, match="tiny"),
    ):
        client.infer({"x": np.zeros((3, 5), dtype=np.float32)})
