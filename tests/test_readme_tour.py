"""The README's "A short tour" runs as written after ``make run`` in a fresh clone.

What must hold: the tour says how to reach the ``docgraph`` that ``make run`` installed
(activating ``.venv``); ``make run`` builds the index the tour's commands open by default,
so its first ``docgraph index`` embeds nothing again; the web console's commands open that
same index; and the JSON API example calls routes the server has (``/openapi.json``) with
arguments the tool accepts and the bearer token it was given.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.config import StoreSettings
from docgraph.serve.http import API_PREFIX, GET_TOOLS, openapi_document
from docgraph.serve.tools import TOOLS
from tests.deployment import Deployment, embedded_store
from tests.helpers import write_files

ROOT = Path(__file__).resolve().parents[1]


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    level = heading.split(" ", 1)[0]
    rest = text[start + len(heading):]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, re.M)]
    return rest[:ends[0]] if ends else rest


def _shell_blocks(section: str) -> list[list[str]]:
    """Each ``sh`` block's commands, continuation lines joined, comments dropped."""
    blocks = []
    for body in re.findall(r"```sh\n(.*?)```", section, re.S):
        joined = body.replace("\\\n", " ")
        lines = [line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
                 for line in joined.splitlines()]
        blocks.append([line for line in lines if line])
    return blocks


def _make_index() -> str:
    found = re.search(r"^DEMO_INDEX\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert found, "the Makefile names the index `make run` builds"
    return found.group(1)


def test_make_run_builds_the_index_the_tour_opens_by_default() -> None:
    assert Path(_make_index()) == StoreSettings().path  # store.path's default
    make = (ROOT / "Makefile").read_text()
    run = make[make.index("\nrun:"):].split("\n\n", 1)[0]
    assert "index examples/corpus --namespace demo" in run


def test_the_tour_activates_the_venv_and_opens_no_other_index() -> None:
    readme = (ROOT / "README.md").read_text()
    tour = _section(readme, "## A short tour")
    command_line = _shell_blocks(_section(tour, "### Command line"))[0]
    first = command_line[0]
    assert first in (". .venv/bin/activate", "source .venv/bin/activate"), first
    assert command_line[1] == "docgraph index examples/corpus --namespace demo"
    for block in _shell_blocks(tour):
        for line in block:
            words = shlex.split(line)
            if "--index" in words:
                assert words[words.index("--index") + 1] == _make_index(), line


def test_the_json_api_example_calls_real_routes_with_valid_arguments() -> None:
    readme = (ROOT / "README.md").read_text()
    agents = _section(readme, "### Agents: MCP server and HTTP API")
    lines = [line for block in _shell_blocks(agents) for line in block]
    assert any(line.startswith("TOKEN=$(docgraph token add ") for line in lines), lines
    calls = [shlex.split(line) for line in lines if line.startswith("curl ")]
    api = [words for words in calls if any(API_PREFIX in w for w in words)]
    assert api, "a curl example of the JSON API"
    paths = openapi_document()["paths"]
    for words in api:
        url = next(w for w in words if w.startswith("http"))
        path, _, query = url.split("8765", 1)[1].partition("?")
        assert path in paths, path
        tool = path.removeprefix(API_PREFIX + "/")
        assert "Authorization: Bearer $TOKEN" in words, words
        if "-d" in words:
            assert "post" in paths[path]
            assert "Content-Type: application/json" in words
            TOOLS[tool].args.model_validate(json.loads(words[words.index("-d") + 1]))
        else:
            assert tool in GET_TOOLS and "get" in paths[path], tool
            TOOLS[tool].args.model_validate(dict(p.split("=", 1) for p in query.split("&")
                                                 if p))


def test_the_json_api_example_answers_from_a_real_server(tmp_path: Path) -> None:
    """The README's curl lines, run as written against a ``docgraph serve`` process (its
    port and the token put in), answer 200 with JSON."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("no curl on this machine")
    readme = (ROOT / "README.md").read_text()
    agents = _section(readme, "### Agents: MCP server and HTTP API")
    lines = [line for block in _shell_blocks(agents) for line in block
             if line.startswith("curl ") and API_PREFIX in line]
    assert lines, "the tour shows the JSON API with curl"
    policy = "assignments:\n  - {user: alice, role: support, domain: demo}\n"
    deployment = Deployment(tmp_path, embedded_store(tmp_path / "index.db"), policy)
    try:
        with DocGraph.open(config_file=deployment.config) as graph:
            graph.index(write_files(tmp_path / "corpus", {
                "faq.md": "# FAQ\n\nError E-417 means the lidar window is blocked.\n"}), "demo")
        token = deployment.run("token", "add", "alice", "--role", "support").strip()
        _, url = deployment.serve_process()
        port = url.rsplit(":", 1)[1]
        for line in lines:
            words = [w.replace("$TOKEN", token).replace(":8765", f":{port}")
                     for w in shlex.split(line)]
            done = subprocess.run([curl, "-sSf", *words[1:]], capture_output=True, text=True,
                                  timeout=120, check=False)
            assert done.returncode == 0, (line, done.stderr)
            answer = json.loads(done.stdout)
            assert answer and "error" not in answer, answer
    finally:
        deployment.stop()
