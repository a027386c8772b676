"""The TensorFlow backend: DeepMET-like GraphDef and SavedModel served by `sonic serve`, against direct runs."""

from __future__ import annotations

import queue
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess
from sonic.protocol.model_config import parse_config_text, validate_config
from sonic.server.backends.base import InstanceContext

pytestmark = pytest.mark.integration

tf = pytest.importorskip("tensorflow")
deepmet = pytest.importorskip("sonic.models.deepmet")
OUTPUT = "output/BiasAdd"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root: Path = tmp_path_factory.mktemp("tensorflow")
    deepmet.write_repository(root, versions=(1, 2), savedmodel=True)
    bad = root / "bad_threads"
    (bad / "1").mkdir(parents=True)
    (bad / "1" / "model.graphdef").write_bytes((root / "deepmet" / "1" / "model.graphdef").read_bytes())
    (bad / "config.pbtxt").write_text(
        'platform: "tensorflow_graphdef"\n'
        'parameters { key: "TF_NUM_INTRA_THREADS" value { string_value: "many" } }\n' + deepmet.CONFIG
    )
    # The SavedModel's own signature against a config that declares another output shape.
    mismatch = root / "saved_mismatch"
    shutil.copytree(root / "deepmet_saved", mismatch)
    config = (mismatch / "config.pbtxt").read_text()
    (mismatch / "config.pbtxt").write_text(
        config.replace(
            '"output" data_type: TYPE_FP32 dims: [ 2 ]', '"output" data_type: TYPE_FP32 dims: [ 3 ]'
        )
    )
    write_tagged_savedmodel(root)
    write_unknown_rank_savedmodel(root)
    write_variable_graphdefs(root)
    return root


def write_variable_graphdefs(root: Path) -> None:
    """OUTPUT = INPUT + VARIABLE (zero once initialized), as a GraphDef: its variable has a value only once
    the init ops of TF_INIT_OPS_FILE ran (Triton's L0_tf_parameters). The file in the model's folder, in the
    version folder, or none."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.int32, [1], name="INPUT")
        variable = tf.compat.v1.Variable(tf.zeros([1], tf.int32), name="VARIABLE")
        tf.add(x, variable, name="OUTPUT")
        tf.compat.v1.global_variables_initializer()  # the operation "init"
    graph_def = graph.as_graph_def().SerializeToString()
    for name, folder in (
        ("variable_no_init", None),
        ("variable_init", ""),
        ("variable_init_in_version", "1"),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.graphdef").write_bytes(graph_def)
        parameter = ""
        if folder is not None:
            (root / name / folder / "init_ops.json").write_text('{"init_ops": ["init"]}')
            parameter = 'parameters { key: "TF_INIT_OPS_FILE" value { string_value: "init_ops.json" } }\n'
        (root / name / "config.pbtxt").write_text(
            f'platform: "tensorflow_graphdef"\nmax_batch_size: 0\n{parameter}'
            'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        )


def write_unknown_rank_savedmodel(root: Path) -> None:
    """An identity whose input has no known rank (Triton's L0_tf_unknown_rank); the config says [ 1 ]."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        x = tf.compat.v1.placeholder(tf.float32, None, name="x")
        signature = tf.compat.v1.saved_model.predict_signature_def({"INPUT": x}, {"OUTPUT": tf.identity(x)})
        builder = tf.compat.v1.saved_model.Builder(str(root / "unknown_rank" / "1" / "model.savedmodel"))
        builder.add_meta_graph_and_variables(
            session, ["serve"], signature_def_map={"serving_default": signature}
        )
        builder.save()
    config = (
        'platform: "tensorflow_savedmodel"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    (root / "unknown_rank" / "config.pbtxt").write_text(config)
    # The same model asking for a custom-op library that is no library: the load must fail on it.
    shutil.copytree(root / "unknown_rank" / "1", root / "bad_op_library" / "1")
    (root / "bad_op_library" / "not_a_library.so").write_bytes(b"not an ELF file")
    (root / "bad_op_library" / "config.pbtxt").write_text(
        config + 'model_operations { op_library_filename: "not_a_library.so" }\n'
    )


# Triton's TF_GRAPH_TAG and TF_SIGNATURE_DEF (its L0_tf_tag_sigdef): one SavedModel, OUTPUT = INPUT times a
# factor that says which graph tag and signature answered.
FACTORS = {("serve", "serving_default"): 2.0, ("serve", "times3"): 3.0, ("custom", "serving_default"): 5.0}
TAGGED = {
    "tagged_default": {},
    "tagged_sigdef": {"TF_SIGNATURE_DEF": "times3"},
    "tagged_tag": {"TF_GRAPH_TAG": "custom"},
    "tagged_missing_tag": {"TF_GRAPH_TAG": "absent"},
}


def write_tagged_savedmodel(root: Path) -> None:
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        signatures = {
            key: tf.compat.v1.saved_model.predict_signature_def(
                {"INPUT": x}, {"OUTPUT": tf.multiply(x, factor)}
            )
            for key, factor in FACTORS.items()
        }
        builder = tf.compat.v1.saved_model.Builder(str(root / "tagged_default" / "1" / "model.savedmodel"))
        serve = {sig: signatures[(tag, sig)] for tag, sig in FACTORS if tag == "serve"}
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map=serve)
        builder.add_meta_graph(
            ["custom"], signature_def_map={"serving_default": signatures[("custom", "serving_default")]}
        )
        builder.save()
    for name, parameters in TAGGED.items():
        if name != "tagged_default":
            shutil.copytree(root / "tagged_default" / "1", root / name / "1")
        entries = "".join(
            f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in parameters.items()
        )
        (root / name / "config.pbtxt").write_text(
            f'platform: "tensorflow_savedmodel"\nmax_batch_size: 4\n{entries}'
            'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
            'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        )


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerProcess]:
    # bad_threads fails to load beside the others (Triton's default would end start-up).
    args = ["--backend-config", "tensorflow,TF_NUM_INTER_THREADS=1", "--exit-on-error=false"]
    with ServerProcess.start([repository], extra_args=args) as process:
        yield process


def direct(repository: Path, version: int, inputs: dict[str, npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """The same graph run in this process, as a client of TensorFlow would."""
    from sonic.server.backends.tensorflow import TensorFlowBackend  # noqa: PLC0415

    config = parse_config_text((repository / "deepmet" / "config.pbtxt").read_text(), "deepmet")
    config.name = "deepmet"
    version_dir = repository / "deepmet" / str(version)
    context = InstanceContext(
        config=config,
        spec=validate_config(config),
        version=version,
        version_dir=version_dir,
        model_path=version_dir / "model.graphdef",
        instance_name="direct",
        device_kind="cpu",
        device_id=0,
    )
    backend = TensorFlowBackend(context)
    try:
        return backend.execute(inputs, [OUTPUT])[OUTPUT]
    finally:
        backend.close()


def tensors(inputs: dict[str, npt.NDArray[Any]]) -> list[grpcclient.InferInput]:
    result = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        result.append(tensor)
    return result


def infer(client: grpcclient.InferenceServerClient, model: str, inputs: dict[str, Any], **kw: Any) -> Any:
    return client.infer(model, tensors(inputs), **kw)


def test_graphdef_served_as_run_directly(repository: Path, server: ServerProcess) -> None:
    inputs = deepmet.example_inputs(3, seed=1)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        served = infer(client, "deepmet", inputs).as_numpy(OUTPUT)
    assert served.shape == (3, 2)
    np.testing.assert_allclose(served, direct(repository, 2, inputs), rtol=1e-5)


def test_every_version_is_its_own_graph(repository: Path, server: ServerProcess) -> None:
    inputs = deepmet.example_inputs(1, seed=2)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        first = infer(client, "deepmet", inputs, model_version="1").as_numpy(OUTPUT)
        second = infer(client, "deepmet", inputs, model_version="2").as_numpy(OUTPUT)
    np.testing.assert_allclose(first, direct(repository, 1, inputs), rtol=1e-5)
    np.testing.assert_allclose(second, direct(repository, 2, inputs), rtol=1e-5)
    assert not np.allclose(first, second)


def test_savedmodel_by_signature_names(repository: Path, server: ServerProcess) -> None:
    inputs = deepmet.example_inputs(2, seed=3)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        saved = infer(client, "deepmet_saved", inputs).as_numpy("output")
        config = client.get_model_config("deepmet_saved", as_json=True)["config"]
    assert config["platform"] == "tensorflow_savedmodel"
    # As Triton fills a config that names only the platform: its one TensorFlow backend, and two CPU
    # instances by default (SetDefaultInstanceCount counts TensorFlow in).
    assert config["backend"] == "tensorflow"
    assert [group["count"] for group in config["instance_group"]] == [2]
    np.testing.assert_allclose(saved, direct(repository, 1, inputs), rtol=1e-5)  # same weights as version 1


def test_concurrent_requests_merge_and_split(repository: Path, server: ServerProcess) -> None:
    batches = [deepmet.example_inputs(n, seed=10 + n) for n in (1, 2, 3, 1)]
    answers: queue.Queue[tuple[int, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        for index, inputs in enumerate(batches):
            client.async_infer(
                "deepmet", tensors(inputs), lambda result, error, i=index: answers.put((i, error or result))
            )
        results = dict(answers.get(timeout=120) for _ in batches)
    for index, inputs in enumerate(batches):
        np.testing.assert_allclose(results[index].as_numpy(OUTPUT), direct(repository, 2, inputs), rtol=1e-5)


def test_savedmodel_config_checked_against_its_signature_at_load(server: ServerProcess) -> None:
    """As Triton's TensorFlow backend: a config the SavedModel's signature does not match fails the load."""
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["saved_mismatch"]["state"] == "UNAVAILABLE"
        assert (
            "model 'saved_mismatch', tensor 'output': the model expects 2 dimensions (shape [-1,2]) but the model "
            "configuration specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed "
            "by the explicit tensor shape, making complete shape [-1,3])"
        ) in index["saved_mismatch"]["reason"]


def test_bad_thread_setting_refuses_the_load(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["bad_threads"]["state"] == "UNAVAILABLE"
        assert "TF_NUM_INTRA_THREADS must be a whole number, got 'many'" in index["bad_threads"]["reason"]
        with pytest.raises(InferenceServerException):
            infer(client, "bad_threads", deepmet.example_inputs(1))


def test_graph_tag_and_signature_come_from_the_config(server: ServerProcess) -> None:
    x = np.array([[1.0, -2.0]], dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT", [1, 2], "FP32")
    tensor.set_data_from_numpy(x)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        for name, factor in (("tagged_default", 2.0), ("tagged_sigdef", 3.0), ("tagged_tag", 5.0)):
            np.testing.assert_array_equal(client.infer(name, [tensor]).as_numpy("OUTPUT"), x * factor)
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index["tagged_missing_tag"]["state"] == "UNAVAILABLE"
    assert "absent" in index["tagged_missing_tag"]["reason"]


def test_an_input_of_unknown_rank_takes_the_configured_shape(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        value = np.array([0.25], dtype=np.float32)
        tensor = grpcclient.InferInput("INPUT", [1], "FP32")
        tensor.set_data_from_numpy(value)
        np.testing.assert_array_equal(client.infer("unknown_rank", [tensor]).as_numpy("OUTPUT"), value)
        wrong = grpcclient.InferInput("INPUT", [1, 2], "FP32")
        wrong.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32))
        with pytest.raises(InferenceServerException) as info:
            client.infer("unknown_rank", [wrong])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected shape for input 'INPUT' for model 'unknown_rank'. Expected [1], got [1,2]" in str(
        info.value.message()
    )


def test_variables_are_initialized_by_the_init_ops_file(server: ServerProcess) -> None:
    value = np.array([10], dtype=np.int32)
    tensor = grpcclient.InferInput("INPUT", [1], "INT32")
    tensor.set_data_from_numpy(value)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        for name in ("variable_init", "variable_init_in_version"):
            np.testing.assert_array_equal(client.infer(name, [tensor]).as_numpy("OUTPUT"), value)
        with pytest.raises(InferenceServerException) as info:
            client.infer("variable_no_init", [tensor])
    assert "Could not find variable VARIABLE" in str(info.value.message())


def test_the_op_libraries_of_the_config_are_loaded_first(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index["bad_op_library"]["state"] == "UNAVAILABLE"
    assert "TensorFlow cannot load op library" in index["bad_op_library"]["reason"]
    assert "not_a_library.so" in index["bad_op_library"]["reason"]
