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
