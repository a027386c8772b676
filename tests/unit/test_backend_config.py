"""``--backend-config``: Triton's parsing (``TritonParser::ParseBackendConfigOption``), its core's merge of the
global settings into each backend's, and ``default-max-batch-size`` in auto-completion (Triton's onnxruntime
backend's ``AutoCompleteMaxBatch``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from sonic.cli.serve import parse_backend_config, parse_backend_config_option
from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.protocol.errors import InvalidArgumentError, ModelConfigError
from sonic.protocol.model_config import (
    Signature,
    complete_from_signature,
    default_max_batch_size,
    fill_defaults,
    parse_config_text,
    validate_config,
)
from sonic.server.backends.base import InstanceContext
from sonic.server.backends.onnxruntime import OnnxRuntimeBackend
from sonic.server.config import BackendOptions

pytestmark = pytest.mark.unit

NO_BACKEND = (
    "No backend specified. --backend-config option format is <backend name>,<setting>=<value> or "
    "<setting>=<value>. Got {}"
)
FORMAT = "--backend-config option format is '<backend name>,<setting>=<value>'. Got {}"


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("onnxruntime,default-max-batch-size=5", ("onnxruntime", "default-max-batch-size", "5")),
        ("default-max-batch-size=6", ("", "default-max-batch-size", "6")),
        ("python,k=a=b", ("python", "k", "a=b")),  # the value is everything after the first '='
        ("a=1,b=2", ("a=1", "b", "2")),  # the backend ends at the first comma, as Triton reads it
        ("tensorflow,x=,y", ("tensorflow", "x", ",y")),
    ],
)
def test_a_setting_is_split_as_triton_splits_it(value: str, parsed: tuple[str, str, str]) -> None:
    assert parse_backend_config_option(value) == parsed


@pytest.mark.parametrize(
    ("value", "words"),
    [
        # qa/L0_backend_config's NEGATIVE_PARSE_ARGS, then the other ways to an empty part
        (",default-max-batch-size=3", NO_BACKEND),
        ("default-max-batch-size=", FORMAT),
        ("default-max-batch-size", FORMAT),
        ("tensorflow,default-max-batch-size=", FORMAT),
        ("tensorflow,default-max-batch-size", FORMAT),
        ("=5", FORMAT),
        ("onnxruntime,=5", FORMAT),
        ("k=v,x", FORMAT),
        ("", FORMAT),
    ],
)
def test_a_setting_triton_cannot_read_is_refused_in_its_words(value: str, words: str) -> None:
    with pytest.raises(ValueError, match="--backend-config option format is") as info:
        parse_backend_config_option(value)
    assert str(info.value) == words.format(value)


def test_the_last_of_a_repeated_setting_wins_and_the_backends_own_beats_the_global_one() -> None:
    options = parse_backend_config(
        [
            "default-max-batch-size=7",
            "onnxruntime,intra_op_thread_count=2",
            "default-max-batch-size=8",
            "tensorflow,default-max-batch-size=3",
        ]
    )
    assert options == BackendOptions(
        {"default-max-batch-size": "8"},
        {"onnxruntime": {"intra_op_thread_count": "2"}, "tensorflow": {"default-max-batch-size": "3"}},
    )
    assert options.for_backend("onnxruntime") == {"default-max-batch-size": "8", "intra_op_thread_count": "2"}
    assert options.for_backend("tensorflow") == {"default-max-batch-size": "3"}
    assert options.for_backend("python") == {
        "default-max-batch-size": "8"
    }  # every backend gets the global ones
    assert parse_backend_config([]).for_backend("onnxruntime") == {}


@pytest.mark.parametrize(
    ("value", "read"),
    [
        (None, 4),
        ("5", 5),
        ("0", 0),
        ("-3", -3),
        (" +7", 7),
        ("12abc", 12),
        ("0x", 0),
        ("2147483647", 2**31 - 1),
    ],
)
def test_default_max_batch_size_is_read_as_stoi_reads_it(value: str | None, read: int) -> None:
    options = {} if value is None else {"default-max-batch-size": value}
    assert default_max_batch_size("onnxruntime", options) == read


@pytest.mark.parametrize("value", ["x", "", "-", " ", "2147483648", "five"])
def test_a_default_max_batch_size_that_is_not_a_number_is_refused_in_tritons_words(value: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        default_max_batch_size("onnxruntime", {"default-max-batch-size": value})
    assert str(info.value).startswith(f"failed to convert '{value}' to integral number")
    assert "default-max-batch-size of backend 'onnxruntime'" in str(info.value)


BATCHED: tuple[Signature, Signature] = (
    [("x", model_config_pb2.TYPE_FP32, [-1, 4])],
    [("y", model_config_pb2.TYPE_FP32, [-1, 2])],
)
FIXED: tuple[Signature, Signature] = (
    [("x", model_config_pb2.TYPE_FP32, [3, 4])],
    [("y", model_config_pb2.TYPE_FP32, [3, 2])],
)


def _completed(text: str, default: int, signature: tuple[Signature, Signature] = BATCHED) -> ModelConfig:
    config = text_format.Parse(text, model_config_pb2.ModelConfig(name="m"))
    complete_from_signature(config, *signature, default)
    return config


@pytest.mark.parametrize(
    ("default", "max_batch_size", "batching", "dims"),
    [
        (4, 4, True, [4]),
        (5, 5, True, [4]),
        (1, 1, False, [4]),
        (0, 0, False, [-1, 4]),
        (-2, 0, False, [-1, 4]),
    ],
)
def test_a_model_that_can_batch_gets_the_default_and_a_batcher_above_one(
    default: int, max_batch_size: int, batching: bool, dims: list[int]
) -> None:
    config = _completed("", default)
    assert config.max_batch_size == max_batch_size
    assert config.HasField("dynamic_batching") is batching
    assert list(config.input[0].dims) == dims


def test_a_configured_scheduler_or_max_batch_size_is_kept() -> None:
    sequence = _completed("sequence_batching { }", 5)
    assert sequence.max_batch_size == 5
    assert not sequence.HasField("dynamic_batching")
    dynamic = _completed("dynamic_batching { max_queue_delay_microseconds: 100 }", 5)
    assert dynamic.dynamic_batching.max_queue_delay_microseconds == 100
    given = _completed("max_batch_size: 64", 0)  # Triton adds the batcher to a given size too
    assert (given.max_batch_size, given.HasField("dynamic_batching")) == (64, True)


def test_a_model_that_cannot_batch_keeps_zero_and_refuses_a_max_batch_size() -> None:
    config = _completed("", 8, FIXED)
    assert (config.max_batch_size, config.HasField("dynamic_batching")) == (0, False)
    assert list(config.input[0].dims) == [3, 4]
    with pytest.raises(ModelConfigError) as info:
        _completed("max_batch_size: 8", 8, FIXED)
    assert str(info.value) == (
        "autofill failed for model 'm': model does not support batching while non-zero max_batch_size is "
        "specified"
    )


def test_onnxruntime_refuses_a_default_it_cannot_read_where_nothing_is_completed(tmp_path: Path) -> None:
    # As Triton's onnxruntime backend, which reads the setting when it starts: auto-complete off or not.
    path = tmp_path / "1" / "model.onnx"
    identity_model(path)
    config = parse_config_text(IDENTITY_CONFIG, "config.pbtxt")
    fill_defaults(config, default_filename="model.onnx", gpu_count=0)
    options = {"default-max-batch-size": "eight"}
    context = InstanceContext(config, validate_config(config), 1, path.parent, path, "m_0", "cpu", 0, options)
    with pytest.raises(InvalidArgumentError, match="failed to convert 'eight' to integral number"):
        OnnxRuntimeBackend(context)
