"""The ``sonic`` command as a new user meets it: every option has help text and ``--help`` shows its
default, and every subcommand answers bad input with one line and a non-zero status, never a traceback."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from sonic.cli.main import HelpFormatter, build_parser, main

pytestmark = pytest.mark.unit


def _parsers(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def _options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if not isinstance(
            action, argparse._SubParsersAction | argparse._HelpAction | argparse._VersionAction
        ):
            yield action


def test_every_option_of_every_subcommand_has_help_and_shows_its_default() -> None:
    parsers = list(_parsers(build_parser(), "sonic"))
    assert {"sonic serve", "sonic perf", "sonic analyze", "sonic deploy local", "sonic scale simulate"} <= {
        name for name, _ in parsers
    }
    missing, hidden = [], []
    for name, parser in parsers:
        formatter = parser._get_formatter()
        assert isinstance(formatter, HelpFormatter), name  # subcommands' parsers too
        for action in _options(parser):
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if action.help == argparse.SUPPRESS:
                continue
            if not action.help:
                missing.append(where)
            elif action.default not in (None, False) and "default" not in (
                formatter._get_help_string(action) or ""
            ):
                hidden.append(where)
    assert missing == []
    assert hidden == []


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("serve", "(default: 8001)"),
        ("perf", "(default localhost:8001)"),
        ("analyze", "(default: analyze-results)"),
    ],
)
def test_help_shows_defaults(command: str, shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    assert shown in " ".join(capsys.readouterr().out.split())


def test_deploy_local_help_shows_replicas_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["deploy", "local", "--help"])
    assert "sonic serve processes behind Envoy (default: 2)" in " ".join(capsys.readouterr().out.split())


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    configless = tmp / "repository" / "m" / "1"
    configless.mkdir(parents=True)
    (configless / "model.onnx").write_bytes(b"not an onnx model")
    not_json = tmp / "report.json"
    not_json.write_text("{ nope")
    nowhere = "/proc/sonic-no-such-folder/out"
    return [
        (
            ["serve", "--model-repository", str(tmp), "--backend-config", "nonsense"],
            "--backend-config option format is '<backend name>,<setting>=<value>'. Got nonsense",
        ),
        (["cmstriton", "stop"], "attempt to stop unknown container"),
        (["models", "build", "--models", "facile", "--out", nowhere], "No such file or directory"),
        (["demo", "protodune", "--out", nowhere], "No such file or directory"),
        (["perf", "-m", "m", "-u", "127.0.0.1:1"], "failed to connect to 127.0.0.1:1"),
        (["analyze", "--model-repository", str(tmp / "repository"), "-m", "m"], "cannot read ONNX model"),
        (["analyze", "--model-repository", str(tmp / "repository"), "-m", "nope"], "no model folder 'nope'"),
        (["scale", "from-perf", str(not_json), "--cpu-s", "1"], "Expecting property name"),
        (["deploy", "render", "--out", nowhere], "No such file or directory"),
        (
            ["validate", "--traffic", nowhere, "--reference", "127.0.0.1:1", "--candidate", "127.0.0.1:2"],
            "no traffic recorded under",
        ),
    ]


def test_every_subcommand_answers_bad_input_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    cases = _bad_inputs(tmp_path)
    commands = {name for name, _ in _parsers(build_parser(), "")} - {""}
    top = {name.split()[0] for name in commands}
    assert {args[0] for args, _ in cases} == top  # every subcommand has a case
    for args, expected in cases:
        code = main(args)
        captured = capsys.readouterr()
        err = captured.err + captured.out  # cmstriton answers on stdout, as CMSSW's script
        assert code != 0, args
        assert "Traceback" not in err, args
        lines = [line for line in err.splitlines() if expected in line]
        assert lines, (args, err)
        assert lines[0].startswith(("sonic ", "Error")), (args, err)
