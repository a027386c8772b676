"""``sonic serve`` start-up errors: each reported as one line on stderr, exit status 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonic.cli import serve
from sonic.cli.main import build_parser

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--log-file", "{missing}/x.log", "--model-repository", "{root}"],
            "sonic serve: --log-file: [Errno 2] No such file or directory: '{missing}/x.log'",
        ),
        (
            ["--model-namespacing=true", "--model-repository", "{root}"],
            "sonic serve: --model-namespacing=true is not supported by sonic serve: model names are global",
        ),
        ([], "sonic serve: the following arguments are required: --model-repository"),
        (
            ["--rate-limit", "bogus", "--model-repository", "{root}"],
            "sonic serve: --rate-limit=bogus: expected execution_count or off",
        ),
        (
            ["--malloc-mmap-threshold-mb", "-1", "--model-repository", "{root}"],
            "sonic serve: --malloc-mmap-threshold-mb must be 0 or more, got -1",
        ),
    ],
    ids=["log file", "triton flag", "configuration", "rate limit", "malloc threshold"],
)
def test_a_start_up_error_is_one_line_and_status_2(
    argv: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = {"missing": str(tmp_path / "missing"), "root": str(tmp_path)}
    args = build_parser().parse_args(["serve", *(a.format(**names) for a in argv)])
    assert serve.run(args) == 2
    assert capsys.readouterr().err == line.format(**names) + "\n"
