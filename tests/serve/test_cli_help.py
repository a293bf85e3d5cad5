"""Every command's ``--help`` shows its help text as written: settings sections such as
``[governance]`` and placeholders such as ``entity:<type>`` must not be eaten by the help
renderer's markup (rich markup drops ``[word]``, Markdown drops ``<word>``)."""

from __future__ import annotations

import re
from typing import Any

import typer
from typer.testing import CliRunner

from docgraph.serve.cli import app

TOKEN = re.compile(r"\[[A-Za-z_.]+\]|<[A-Za-z_]+>")


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, command in sorted(getattr(group, "commands", {}).items()):
        found += _commands(command, (*path, name))
    return found


def _raw_help(command: Any) -> str:
    parts = [command.help or ""]
    parts += [getattr(p, "help", None) or "" for p in command.params]
    return "\n".join(parts)


def test_help_texts_keep_their_brackets_and_placeholders() -> None:
    root = typer.main.get_command(app)
    runner = CliRunner()
    checked = 0
    for path in _commands(root):
        command: Any = root
        for name in path:
            command = command.commands[name]
        tokens = set(TOKEN.findall(_raw_help(command)))
        if not tokens:
            continue
        result = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, result.output
        shown = " ".join(result.output.split())
        for token in tokens:
            assert token in shown, f"docgraph {' '.join(path)} --help lost {token!r}"
        checked += 1
    assert checked >= 4  # [governance] in three places, entity:<type> in three


def test_flags_show_no_value_placeholder_in_help() -> None:
    """A flag takes no value: no command's ``--help`` (its own ``--help`` flag included)
    shows ``<bool>`` beside it."""
    root = typer.main.get_command(app)
    runner = CliRunner()
    paths = _commands(root)
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, result.output
        assert "<bool>" not in result.output, f"docgraph {' '.join(path)} --help:\n" \
                                              f"{result.output}"
    shown = runner.invoke(app, ["search", "--help"], terminal_width=200).output
    assert "--json" in shown and "<int>" in shown  # options with values keep their type
    assert len(paths) > 20


def test_version_prints_the_installed_package_version() -> None:
    """``docgraph --version`` (a real process) prints the version importlib.metadata
    knows and exits 0 without needing a command or an index."""
    import os
    import subprocess
    import sys
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "docgraph.serve.cli", "--version"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ),
                          cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"docgraph {version('docgraph')}"
    in_help = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    assert "--version" in in_help
