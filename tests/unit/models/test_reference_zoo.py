"""The reference model zoo: sizes, configs consistent with the modules, the BDT artifact, the build cache."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import xgboost

from sonic.cli.main import main
from sonic.models import build
from sonic.models.torchscript import export_torchscript, torchscript_variant
from sonic.models.zoo import ReferenceModel, registry, tau_bdt
from sonic.protocol import dtypes
from sonic.protocol.model_config import parse_config_text, validate_config

pytestmark = pytest.mark.unit

ALL_MODELS = sorted(registry())

EXPECTED_NAMES = {
    "emtrk_michel",
    "facile",
    "deepcalo",
    "resnet50",
    "resnet_top",
    "particlenet_ak4",
    "particlenet_ak8",
    "deepmet",
    "deeptau",
    "tau_bdt",
}


def test_registry_holds_every_model_of_the_issue() -> None:
    assert set(registry()) == EXPECTED_NAMES


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        ("emtrk_michel", 11_900_420, 11_900_420),  # exactly the seed's table
        ("facile", 1_500, 2_500),  # "about 2k"
        ("deepcalo", 1_500_000, 2_500_000),  # "about 2M"
        ("resnet_top", 8_000_000, 12_000_000),  # "about 10M"
        ("resnet50", 23_000_000, 26_000_000),  # ResNet-50
        ("particlenet_ak4", 330_000, 410_000),  # published ParticleNet: ~366k
        ("particlenet_ak8", 330_000, 410_000),
    ],
)
def test_sizes_match_the_seed_studies(name: str, low: int, high: int) -> None:
    assert low <= registry()[name].parameter_count <= high


@pytest.mark.parametrize("name", ALL_MODELS)
def test_config_matches_the_model_inputs(name: str) -> None:
    model = registry()[name]
    config = parse_config_text(model.config_text, f"{name}/config.pbtxt")
    spec = validate_config(config)
    assert config.name == name
    assert tuple(spec.inputs) == model.input_names
    assert tuple(spec.outputs) == model.output_names
    assert config.HasField("dynamic_batching")
    assert spec.max_batch_size >= model.seed_batch_size
    for size in config.dynamic_batching.preferred_batch_size:
        assert size % model.seed_batch_size == 0, "preferred sizes should be whole numbers of seed batches"
    inputs = model.make_inputs(model.seed_batch_size, np.random.default_rng(0))
    assert set(inputs) == set(model.input_names)
    for input_name, tensor in spec.inputs.items():
        array = inputs[input_name]
        assert array.shape == (model.seed_batch_size, *tensor.dims), input_name
        assert dtypes.from_numpy(array.dtype) == tensor.datatype, input_name


def test_variable_multiplicity_is_padded_with_a_mask() -> None:
    model = registry()["particlenet_ak8"]
    inputs = model.make_inputs(64, np.random.default_rng(1))
    mask = inputs["pf_mask"][:, 0, :]
    counts = mask.sum(axis=1)
    assert counts.min() < counts.max() <= 100  # multiplicities vary
    # Padding is contiguous at the end and carries no features.
    assert np.all(np.diff(mask, axis=1) <= 0)
    assert np.all(inputs["pf_features"][mask[:, None, :].repeat(25, axis=1) == 0] == 0)


def test_tau_bdt_artifact_predicts_like_xgboost(tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    tau_bdt.write_artifact(path)
    saved = xgboost.Booster()
    saved.load_model(str(path))
    trained = tau_bdt.train()
    x, y = tau_bdt.training_data()
    fresh = tau_bdt.TAU_BDT.make_inputs(1000, np.random.default_rng(7))["input__0"]
    for data in (x, fresh):
        np.testing.assert_array_equal(
            saved.predict(xgboost.DMatrix(data)), trained.predict(xgboost.DMatrix(data))
        )
    # It learned something from the generated data (labels are ~half taus).
    accuracy = float(np.mean((saved.predict(xgboost.DMatrix(x)) > 0.5) == y))
    assert accuracy > 0.7
    assert tau_bdt.node_count(path) == tau_bdt.TAU_BDT.parameter_count
    assert json.loads(path.read_text())["learner"]["objective"]["name"] == "binary:logistic"


def test_tau_bdt_is_written_for_the_trees_backend(tmp_path: Path) -> None:
    (model_dir,) = build.build_repository(tmp_path, ["tau_bdt"])
    assert (model_dir / "1" / "model.json").is_file()
    config = parse_config_text((model_dir / "config.pbtxt").read_text(), "tau_bdt")
    assert config.backend == "trees"
    assert config.default_model_filename == "model.json"
    assert config.parameters["model_type"].string_value == "xgboost_json"
    with pytest.raises(ValueError, match="not a PyTorch model"):
        build.export_onnx(tau_bdt.TAU_BDT, tmp_path / "x.onnx")


def test_build_reuses_files_when_up_to_date(tmp_path: Path) -> None:
    model = registry()["facile"]
    model_dir = build.build_model(model, tmp_path)
    onnx_file = model_dir / "1" / "model.onnx"
    first = onnx_file.stat().st_mtime_ns
    assert build.is_up_to_date(model, model_dir)
    build.build_model(model, tmp_path)
    assert onnx_file.stat().st_mtime_ns == first

    newer = dataclasses.replace(model, recipe_version=model.recipe_version + 1)
    assert not build.is_up_to_date(newer, model_dir)
    build.build_model(newer, tmp_path)
    assert build.is_up_to_date(newer, model_dir)
    assert not build.is_up_to_date(model, model_dir)

    (model_dir / build.STAMP).write_text("not json")
    assert not build.is_up_to_date(newer, model_dir)
    assert not list(model_dir.rglob(".tmp-*")), "no temporary file may be left behind"


def test_reference_model_needs_exactly_one_way_to_build() -> None:
    model = registry()["facile"]
    with pytest.raises(ValueError, match="exactly one"):
        dataclasses.replace(model, write_artifact=tau_bdt.write_artifact)
    with pytest.raises(ValueError, match="exactly one"):
        ReferenceModel(
            name="nothing",
            description="",
            make_inputs=model.make_inputs,
            input_names=(),
            output_names=(),
            config_text="",
            parameter_count=0,
            seed_batch_size=1,
        )


def test_cli_lists_and_builds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    for name in EXPECTED_NAMES:
        assert name in listing
    out = tmp_path / "repo"
    assert main(["models", "build", "--out", str(out), "--models", "facile", "deepmet"]) == 0
    assert "built 2 model(s)" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["deepmet", "facile"]
    assert (out / "deepmet" / "1" / "model.onnx").is_file()
    assert (out / "deepmet" / "config.pbtxt").is_file()


def test_cli_rejects_unknown_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "build", "--out", str(tmp_path), "--models", "facile", "nosuch"]) == 2
    message = capsys.readouterr().out
    assert "nosuch" in message
    assert "facile" in message  # the available ones are listed
    assert not any(tmp_path.iterdir()), "nothing is built when a name is wrong"


# TorchScript is deprecated in this torch release, but it is what Triton's PyTorch backend loads.
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", ["facile", "particlenet_ak8", "deepmet"])
def test_torchscript_variant_matches_the_module_at_other_batch_sizes(name: str, tmp_path: Path) -> None:
    model = registry()[name]
    assert model.make_module is not None
    module = model.make_module()
    variant = torchscript_variant(model)
    export_torchscript(model, tmp_path / "model.pt", module)
    config = parse_config_text(variant.config_text, variant.name)
    spec = validate_config(config)
    assert config.backend == "pytorch"
    assert list(spec.inputs) == [f"INPUT__{i}" for i in range(len(model.input_names))]
    assert list(spec.outputs) == [f"OUTPUT__{i}" for i in range(len(model.output_names))]
    assert config.max_batch_size == parse_config_text(model.config_text, name).max_batch_size
    traced = torch.jit.load(str(tmp_path / "model.pt"))  # type: ignore[no-untyped-call]
    for batch in (1, 5):  # traced at batch 2: the batch dimension must stay dynamic
        inputs = variant.make_inputs(batch, np.random.default_rng(batch))
        args = [torch.from_numpy(inputs[key]) for key in variant.input_names]
        with torch.inference_mode():
            expected, got = module(*args), traced(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(variant.output_names)
        for e, g in zip(expected, got, strict=True):
            assert g.shape[0] == batch
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_build_writes_torchscript_variants_on_request(tmp_path: Path) -> None:
    paths = build.build_repository(tmp_path, ["facile", "tau_bdt"], torchscript=True)
    assert sorted(p.name for p in paths) == ["facile", "facile_torchscript", "tau_bdt"]
    assert (tmp_path / "facile_torchscript" / "1" / "model.pt").is_file()
    config = parse_config_text((tmp_path / "facile_torchscript" / "config.pbtxt").read_text(), "x")
    assert config.name == "facile_torchscript"
    assert config.default_model_filename == "model.pt"


def test_torchscript_variant_needs_a_pytorch_model() -> None:
    with pytest.raises(ValueError, match="not a PyTorch model"):
        torchscript_variant(registry()["tau_bdt"])
