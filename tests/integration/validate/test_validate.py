"""``sonic validate`` end to end: a recorded trace replayed to two setups that agree, that differ within
what was measured (an FP16 conversion), that differ by a defect (a perturbed weight), and to a target
that never answers."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.validate.conftest import (
    REFUSED,
    SAMPLED_CLASSIFIER,
    SAMPLED_STRINGS,
    WITHOUT_CONTENTS,
    Repositories,
    run_validate,
)

from sonic.launch import ServerProcess
from sonic.testing import chromium

pytestmark = pytest.mark.integration

SAMPLED = SAMPLED_CLASSIFIER + SAMPLED_STRINGS + REFUSED


@pytest.fixture(scope="module")
def served(repositories: Repositories) -> Iterator[ServerProcess]:
    with ServerProcess.start([repositories.models], extra_args=["--http-port", "0"]) as server:
        yield server


@pytest.mark.parametrize("scheme", ["grpc", "http"])
def test_the_same_models_agree_exactly_in_process_and_served(
    repositories: Repositories,
    served: ServerProcess,
    scheme: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    address = served.grpc_address if scheme == "grpc" else served.http_address
    reference, candidate = f"direct:{repositories.models}", f"{scheme}://{address}"
    done = run_validate(tmp_path, capsys, "--traffic", str(repositories.trace), "--reference", reference,
                        "--candidate", candidate)  # fmt: skip
    assert done.code == 0, done.stdout + done.stderr
    report = done.report
    assert report["passed"] is True
    assert report["requests"] == SAMPLED  # only the requests recorded with contents
    assert report["synthetic"] == 0
    classifier = report["models"]["classifier"]
    assert classifier["both_failed"] == REFUSED  # the wrong shape: the same status and message from both
    assert classifier["status_mismatches"] == 0
    probabilities = classifier["outputs"]["PROBABILITIES"]
    assert probabilities["max_abs"] == 0.0
    assert probabilities["max_ulp"] == 0.0
    assert probabilities["argmax_agreement"] == 1.0
    assert classifier["outputs"]["LABEL"]["tolerance"] == "exact"
    assert report["models"]["strings"]["outputs"]["OUTPUT0"]["datatype"] == "BYTES"
    assert report["models"]["strings"]["outputs"]["OUTPUT0"]["requests"] == SAMPLED_STRINGS
    assert "PASS" in done.stdout
    assert "validate: PASS" in done.stdout


def test_synthetic_inputs_cover_the_requests_recorded_without_contents(
    repositories: Repositories, served: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = run_validate(tmp_path, capsys, "--traffic", str(repositories.trace), "--synthetic", "--model",
                        "classifier", "--reference", f"direct:{repositories.models}", "--candidate",
                        served.grpc_address)  # fmt: skip
    assert done.code == 0, done.stdout + done.stderr
    assert done.report["requests"] == SAMPLED_CLASSIFIER + REFUSED + WITHOUT_CONTENTS
    assert done.report["synthetic"] == WITHOUT_CONTENTS
    assert list(done.report["models"]) == ["classifier"]


def test_a_perturbed_model_is_caught(
    repositories: Repositories, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = run_validate(tmp_path, capsys, "--traffic", str(repositories.trace), "--model", "classifier",
                        "--reference", f"direct:{repositories.models}",
                        "--candidate", f"direct:{repositories.perturbed}/classifier:1",
                        "--atol", "1e-3")  # fmt: skip
    assert done.code == 1, done.stdout + done.stderr
    probabilities = done.report["models"]["classifier"]["outputs"]["PROBABILITIES"]
    assert probabilities["passed"] is False
    assert probabilities["max_abs"] > 1e-3
    assert probabilities["elements_outside"] > 0
    worst = probabilities["worst"]
    assert worst
    assert worst[0]["request_id"].startswith("c")
    assert worst[0]["arrival"].startswith("2023-11-14 22:13:20.")  # the recorded arrival, in UTC
    assert worst[0]["max_abs"] == probabilities["max_abs"]
    assert "FAIL" in done.stdout
    assert (tmp_path / "report.html").is_file()


def test_an_fp16_conversion_is_measured_and_passes_the_tolerance_chosen_from_it(
    repositories: Repositories, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--traffic", str(repositories.trace), "--model", "classifier", "--reference",
              f"direct:{repositories.models}", "--candidate", f"direct:{repositories.fp16}"]  # fmt: skip
    exact = run_validate(tmp_path / "exact", capsys, *common)
    assert exact.code == 1  # FP16 inside: not bitwise the FP32 model
    measured = exact.report["models"]["classifier"]["outputs"]["PROBABILITIES"]
    assert 0 < measured["max_abs"] < 5e-3  # half precision's rounding, not a defect
    assert measured["max_ulp"] > 1
    assert exact.report["models"]["classifier"]["outputs"]["LABEL"]["passed"] is True
    assert measured["argmax_agreement"] == 1.0
    chosen = run_validate(tmp_path / "chosen", capsys, *common, "--atol", f"{3 * measured['max_abs']:.2g}")
    assert chosen.code == 0, chosen.stdout
    # The same tolerance, set for this output alone, is reported as its own.
    only = run_validate(
        tmp_path / "only", capsys, *common, "--atol", f"PROBABILITIES={3 * measured['max_abs']:.2g}"
    )
    assert only.code == 0, only.stdout
    assert only.report["models"]["classifier"]["outputs"]["PROBABILITIES"]["tolerance"]["atol"] > 0


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP listener that accepts connections and never answers: a hung server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def test_a_target_that_hangs_is_reported_per_request_with_its_deadline(
    repositories: Repositories, silent_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    done = run_validate(tmp_path, capsys, "--traffic", str(repositories.trace), "--model", "classifier",
                        "--reference", f"direct:{repositories.models}", "--candidate", silent_server,
                        "--timeout-s", "0.5", "--concurrency", "4")  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.code == 1
    classifier = done.report["models"]["classifier"]
    assert classifier["unanswered"] == SAMPLED_CLASSIFIER + REFUSED
    assert "no answer within the deadline of 0.5 s (--timeout-s)" in classifier["examples"][0]["what"]
    # Four in flight at a time, each given up after 0.5 s: about 2 s, never a hang.
    assert elapsed < 30, elapsed


def test_options_that_name_nothing_are_refused_not_ignored(
    repositories: Repositories, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = run_validate(tmp_path, capsys, "--traffic", str(repositories.trace), "--model", "classifier",
                        "--reference", f"direct:{repositories.models}", "--candidate",
                        f"direct:{repositories.models}", "--atol", "LABLE=0.1", "--rename", "X=Y")  # fmt: skip
    assert done.code == 2
    assert "tolerance for 'LABLE': no floating-point output of that name was compared" in done.stderr
    assert "--rename X: no input or output of that name" in done.stderr


def test_a_target_naming_one_model_needs_a_trace_of_one(
    repositories: Repositories, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = run_validate(tmp_path, capsys, "--traffic", str(repositories.trace), "--reference",
                        f"direct:{repositories.models}", "--candidate", f"direct:{repositories.models}/classifier")  # fmt: skip
    assert done.code == 2
    assert (
        "names model 'classifier' but the trace holds classifier, strings: choose the recorded one"
        in done.stderr
    )


@pytest.mark.slow
def test_the_report_renders_in_chromium(
    repositories: Repositories, browser: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = run_validate(tmp_path, capsys, "--traffic", str(repositories.trace), "--model", "classifier",
                        "--reference", f"direct:{repositories.models}",
                        "--candidate", f"direct:{repositories.perturbed}", "--atol", "1e-3")  # fmt: skip
    assert done.code == 1
    page = tmp_path / "report.html"
    text = page.read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == 1  # one histogram: PROBABILITIES (LABEL is exact)
    assert "Worst requests" in text
    assert "BEYOND TOLERANCE" in text
    chromium.assert_renders(browser, page, tmp_path, (1100, 1800))


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--seed", "3"], "--seed sets the synthetic inputs: it needs --synthetic"),
        (["--transport", "grpcio"], "--transport chooses the gRPC client: neither target is gRPC"),
        (["--max-ulp", "OUT=1.5"], "--max-ulp OUT=1.5: expected a number (int)"),
        (["--atol", "-1"], "tolerances are >= 0"),
    ],
)
def test_options_that_would_change_nothing_or_are_wrong_are_refused(
    repositories: Repositories,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    words: str,
) -> None:
    direct = f"direct:{repositories.models}"
    done = run_validate(tmp_path, capsys, "--traffic", str(repositories.trace), "--reference", direct,
                        "--candidate", direct, *options)  # fmt: skip
    assert done.code == 2
    assert words in done.stderr
