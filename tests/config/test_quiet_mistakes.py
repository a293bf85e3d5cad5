"""Mistakes that used to fail quietly now say what is wrong: a misspelled settings section in
an environment variable, an invalid value or key (key, value, expectation, did-you-mean;
no pydantic report or URL), a mistyped ``--index`` path for a read command (nothing is
created), an unknown namespace in the Python API, and a script without a ``__main__`` guard
(the guard's message, not RefreshBusy tracebacks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.embedding.embedders import HashingEmbedder
from docgraph.errors import ConfigError, UnknownNamespace
from docgraph.serve.cli import app
from tests.conftest import REPO
from tests.helpers import write_files


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in [k for k in os.environ if k.startswith("DOCGRAPH_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_misspelled_section_in_an_environment_variable_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCGRAPH_EMBD__MODEL", "hashing")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    message = str(raised.value)
    assert "DOCGRAPH_EMBD__MODEL" in message
    assert "did you mean embed (DOCGRAPH_EMBED__MODEL)?" in message


def test_invalid_values_and_keys_name_key_value_expectation_and_a_guess(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCGRAPH_STORE__BACKEND", "postgress")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    message = str(raised.value)
    assert "store.backend = 'postgress' (from DOCGRAPH_STORE__BACKEND)" in message
    assert "did you mean 'postgres'?" in message
    assert "pydantic" not in message and "https://" not in message
    monkeypatch.delenv("DOCGRAPH_STORE__BACKEND")
    config = tmp_path / "settings.toml"
    config.write_text('[embed]\nmodle = "hashing"\nbatch_size = 0\n', encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_settings(config)
    message = str(raised.value)
    assert f"unknown settings key embed.modle (in {config})" in message
    assert "did you mean embed.model?" in message
    assert "embed.batch_size = 0" in message and "greater than or equal to 1" in message
    assert "https://" not in message and "validation error" not in message


def test_admin_set_names_the_key_the_value_and_a_guess(tmp_path: Path) -> None:
    """``docgraph admin set`` validates one section at a time: its errors read like the
    settings file's, with the section in the key, not pydantic's report of the section."""
    runner = CliRunner()
    for assignment, said in (
            ("refresh.interval_seconds=soon",
             "refresh.interval_seconds = 'soon' (in the admin settings): expected a valid "
             "number"),
            ("refresh.intervl_seconds=5",
             "unknown settings key refresh.intervl_seconds (in the admin settings); did you "
             "mean refresh.interval_seconds?")):
        result = runner.invoke(app, ["admin", "set", assignment])
        # main() prints a DocgraphError as "error: <message>"; the runner keeps it raised
        output = " ".join(f"{result.output} {result.exception}".split())
        assert result.exit_code == 1 and said in output, output
        assert "validation error" not in output and "https://" not in output
        assert "RefreshSettings" not in output


@pytest.mark.parametrize("command", [["search", "x"], ["lookup", "x"], ["read", "a.md"],
                                     ["status"], ["entities"], ["context", "x"],
                                     ["communities"], ["graph", "neighbors", "x"], ["trace"],
                                     ["mcp"]])
def test_read_commands_do_not_create_an_index(tmp_path: Path, command: list[str]) -> None:
    wrong = tmp_path / "typo" / "index.db"
    result = CliRunner().invoke(app, ["--index", str(wrong), *command])
    assert result.exit_code == 1, result.output
    assert "no index at" in " ".join(result.output.split())
    assert not (tmp_path / "typo").exists()


def test_python_api_names_an_unknown_namespace(tmp_path: Path) -> None:
    folder = write_files(tmp_path / "docs", {"a.md": "# A\n\nThe Kestrel picker."})
    graph = DocGraph.open(tmp_path / "i.db", embedder=HashingEmbedder())
    try:
        graph.index(folder, namespace="handbook")
        assert graph.search("Kestrel", namespaces={"handbook"}, k=1)
        for call in (lambda: graph.search("Kestrel", namespaces={"handbok"}),
                     lambda: graph.entities({"handbok"}),
                     lambda: graph.documents({"handbok"})):
            with pytest.raises(UnknownNamespace) as raised:
                call()
            assert "'handbok'" in str(raised.value) and "'handbook'" in str(raised.value)
    finally:
        graph.close()


def test_script_without_main_guard_shows_the_guard_message(tmp_path: Path) -> None:
    """The README's snippet as a script, on more files than are prepared inline."""
    folder = write_files(tmp_path / "docs", {
        f"doc-{i:02d}.md": f"# Note {i}\n\nThe Kestrel K{i} picker reported error E-{i}."
        for i in range(40)})
    script = tmp_path / "build.py"
    script.write_text(
        "from docgraph import DocGraph\n\n"
        f"with DocGraph.open({str(tmp_path / 'i.db')!r}) as dg:\n"
        f"    dg.index({str(folder)!r}, namespace='demo')\n"
        "    print('HITS', len(dg.search('Kestrel', namespaces={'demo'}, k=3)))\n",
        encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCGRAPH_")}
    env.update(DOCGRAPH_EMBED__MODEL="hashing", DOCGRAPH_LOADER__WORKERS="2",
               PYTHONPATH=os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=180, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("HITS 3") == 1
    assert 'if __name__ == "__main__":' in done.stderr
    assert "RefreshBusy" not in done.stderr and "Traceback" not in done.stderr
    assert "sources add" not in done.stderr


def test_the_governed_path_still_answers_nothing_for_an_empty_domain(tmp_path: Path) -> None:
    """``strict=False`` (the governed service's): a domain with nothing indexed yet is an
    empty answer in every mode, not an error."""
    folder = write_files(tmp_path / "docs", {"a.md": "# A\n\nThe Kestrel picker."})
    graph = DocGraph.open(tmp_path / "i.db", embedder=HashingEmbedder())
    try:
        graph.index(folder, namespace="handbook")
        for mode in ("hybrid", "vector_first"):
            hits = graph.search("Kestrel", namespaces={"handbook", "empty"}, k=3,
                                mode=mode, strict=False)  # type: ignore[arg-type]
            assert hits and {h.namespace for h in hits} == {"handbook"}
    finally:
        graph.close()
