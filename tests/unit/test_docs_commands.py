"""Every ``sonic ...`` command line shown in README.md and docs/*.md parses with the real command-line parser.

A renamed flag or a removed subcommand then fails here instead of in a reader's shell. Only code blocks
are read: fenced ones (except those tagged ``text``, which show output or diagrams) and indented ones.
The lines are parsed with :func:`sonic.cli.main.build_parser` (argparse), never run; inline spans in
prose are left out because they name options without their values (``sonic serve --traffic-log``).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from sonic.cli.main import build_parser

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# ``sonic`` at the start of a shell line: after ``$ ``, ``NAME=value`` assignments or a path (``.venv/bin/``).
_COMMAND = re.compile(r"^(?:\$\s+)?(?:\w+=\S*\s+)*(?:\S*/)?sonic(?:\s|$)")


def code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line in a fenced block not tagged ``text``, or in an indented block."""
    found: list[tuple[int, str]] = []
    fence: str | None = None  # the open fence's tag, None outside a fenced block
    previous_blank_or_code = True
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip()
            continue
        if fence is not None:
            if fence != "text":
                found.append((number, line))
        elif line.startswith("    ") and stripped and previous_blank_or_code:
            found.append((number, line))
            continue
        previous_blank_or_code = not stripped
    return found


def commands(text: str) -> list[tuple[int, str]]:
    """(first line number, command) of each ``sonic`` command in the code blocks, continuation lines joined."""
    found: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None  # a command's first line number and its text so far
    for number, line in code_lines(text):
        stripped = line.strip()
        if pending is not None:
            start, text_so_far = pending[0], f"{pending[1]} {stripped}"
        elif _COMMAND.match(stripped):
            start, text_so_far = number, stripped
        else:
            continue
        pending = (start, text_so_far[:-1]) if text_so_far.endswith("\\") else None
        if pending is None:
            found.append((start, text_so_far))
    return found


def parse_error(command: str) -> str | None:
    """What argparse says of the command line, or None when it parses."""
    argv = shlex.split(command, comments=True)
    while argv and not re.fullmatch(r"(?:\S*/)?sonic", argv[0]):
        argv.pop(0)  # ``$``, environment assignments
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv[1:])
    except SystemExit as exit_:
        if not exit_.code:  # --help, --version
            return None
        return stderr.getvalue().strip() or f"exit {exit_.code}"
    return None


def documented_commands() -> list[tuple[str, str]]:
    return [
        (f"{path.relative_to(REPO)}:{number}", command)
        for path in DOCS
        for number, command in commands(path.read_text())
    ]


def test_the_reader_finds_commands_in_both_kinds_of_block() -> None:
    text = (
        "Prose `sonic serve --traffic-log` is not read.\n\n"
        "```bash\n$ SONIC_X=1 .venv/bin/sonic serve --model-repository repo \\\n    --grpc-port 8001  # c\n```\n\n"
        "```text\nsonic deploy local: replica 0: started\n```\n\n"
        "    sonic perf -m identity\n"
    )
    assert commands(text) == [
        (4, "$ SONIC_X=1 .venv/bin/sonic serve --model-repository repo  --grpc-port 8001  # c"),
        (12, "sonic perf -m identity"),
    ]
    assert parse_error(commands(text)[0][1]) is None
    assert parse_error("sonic serve --no-such-flag") is not None
    assert parse_error("sonic no-such-command") is not None


def test_the_docs_show_commands() -> None:
    assert (
        len(documented_commands()) >= 5
    )  # the reader still finds them: a format change cannot empty the check


@pytest.mark.parametrize(
    ("where", "command"), documented_commands(), ids=[where for where, _ in documented_commands()]
)
def test_documented_command_parses(where: str, command: str) -> None:
    assert parse_error(command) is None, f"{where}: `{command}` no longer parses: {parse_error(command)}"
