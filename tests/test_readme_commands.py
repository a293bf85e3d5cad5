"""Every ``docgraph ...`` command line in the README's shell blocks parses with the CLI as
it is now: the command and subcommand exist, every option is one the command has, values
have the right type and required arguments are given. A renamed command or option fails
this test instead of a reader. Nothing runs: the lines are parsed (as the command line
would parse them), never invoked, so no index is opened and no model is loaded; each
command's ``--help`` is shown once besides."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from docgraph.serve.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELL_BLOCK = re.compile(r"```(?:sh|bash|shell|console)\n(.*?)```", re.S)
PUNCTUATION = set("();<>|&")


def _lines(markdown: str) -> list[str]:
    """The command lines of every shell block: continuation lines joined, comments
    dropped (a ``#`` that starts a word; ``doc.md#chunk-1`` stays)."""
    lines = []
    for body in SHELL_BLOCK.findall(markdown):
        for line in body.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                lines.append(line)
    return lines


def docgraph_commands(markdown: str) -> list[list[str]]:
    """The arguments of every ``docgraph`` invocation in the markdown's shell blocks,
    including those inside ``$(...)`` and after ``&&``, ``|``, ``;`` or ``&``."""
    found: list[list[str]] = []
    for line in _lines(markdown):
        pieces = [line]
        for inner in re.findall(r"\$\(([^()]*)\)", line):
            pieces.append(inner)
        pieces[0] = re.sub(r"\$\([^()]*\)", "SUBSTITUTED", line)
        for piece in pieces:
            lexer = shlex.shlex(piece, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = ""  # comments are gone; a "#" inside a word stays
            segment: list[str] = []
            for token in [*lexer, ";"]:
                if set(token) <= PUNCTUATION:
                    words = segment
                    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                        words = words[1:]  # VAR=value before the command
                    if words and (words[0] == "docgraph" or words[0].endswith("/docgraph")):
                        found.append(words[1:])
                    segment = []
                else:
                    segment.append(token)
    return found


class CommandLineError(Exception):
    """The command line was refused as the real one would refuse it (exit 2, or another
    non-zero exit before any command ran)."""


def parse(args: list[str]) -> tuple[str, ...]:
    """Parse ``docgraph ARGS`` with the real command tree whose commands do nothing (every
    callback replaced, in a tree built for this call); the path of the command that would
    run (e.g. ``("graph", "neighbors")``). Raises :class:`CommandLineError` with the CLI's
    message where the command line is refused: no such command or option, a bad value, a
    missing argument."""
    root: Any = typer.main.get_command(app)  # a fresh tree: the app itself is untouched
    called: list[tuple[str, ...]] = []

    def stub(path: tuple[str, ...]) -> Any:
        def callback(**_: Any) -> None:
            called.append(path)
        return callback

    def replace_callbacks(command: Any, path: tuple[str, ...]) -> None:
        command.callback = stub(path)
        for name, sub in getattr(command, "commands", {}).items():
            replace_callbacks(sub, (*path, name))

    replace_callbacks(root, ())
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            root.main(list(args), prog_name="docgraph", standalone_mode=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    if code != 0 or not called:
        raise CommandLineError(f"exit {code}: {' '.join(stderr.getvalue().split())}")
    return called[-1]


COMMANDS = docgraph_commands(README.read_text(encoding="utf-8"))


def test_the_readme_has_docgraph_commands_to_check() -> None:
    assert len(COMMANDS) >= 20, COMMANDS  # the parser found the README's command lines
    assert ["token", "add", "alice", "--role", "support"] in COMMANDS  # inside $(...)
    assert ["serve"] in COMMANDS  # before a trailing &


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(c)[:60] for c in COMMANDS])
def test_readme_command_parses_with_the_cli(args: list[str]) -> None:
    try:
        parse(args)
    except CommandLineError as exc:
        pytest.fail(f"README: `docgraph {shlex.join(args)}` no longer parses: {exc}")


def test_every_readme_command_shows_its_help() -> None:
    runner = CliRunner()
    paths = sorted({parse(args) for args in COMMANDS})
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output
    assert ("graph", "neighbors") in paths and ("sources", "add") in paths


@pytest.mark.parametrize("args", [
    ["serch", "x"],  # a renamed command
    ["search", "x", "--kk", "3"],  # a renamed option
    ["search", "x", "-k", "three"],  # a value of the wrong type
    ["sources", "add", "s3://b/h"],  # a required option missing
    ["graph", "neighbours", "E-417"],  # a renamed subcommand
    ["graph"],  # a group without its command
])
def test_a_line_that_no_longer_matches_the_cli_fails(args: list[str]) -> None:
    with pytest.raises(CommandLineError):
        parse(args)


def test_the_command_lines_are_found_where_a_shell_would_run_them() -> None:
    markdown = ("```sh\nX=1 docgraph status --json && .venv/bin/docgraph graph build | cat\n"
                "echo docgraph  # not a call\nT=$(docgraph token list)\n"
                "docgraph read a.md#chunk-1  # comment\n```\n"
                "```toml\n# docgraph search ignored\n```\n")
    assert docgraph_commands(markdown) == [["status", "--json"], ["graph", "build"],
                                           ["token", "list"], ["read", "a.md#chunk-1"]]
