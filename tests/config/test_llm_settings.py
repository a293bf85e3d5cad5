"""``[llm]`` configures a real OpenAI-compatible chat server: community reports are written
by it and global search map-reduces with it; half a configuration is refused."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from docgraph.config import load_settings
from docgraph.errors import ConfigError
from tests.helpers import write_files

DOCS = {
    "postmortem.md": "# Rotterdam outage\n\nA memory leak in firmware 5.3.0 made every Tern T3 "
    "lose localisation at Nordhaven Logistics. Tomasz Nowak tracks the follow-up.\n",
    "people.md": "# Directory\n\nTomasz Nowak works in Gdansk with Nordhaven Logistics and "
    "owns the release calendar for firmware 5.3.0.\n",
}


class ChatServer:
    """A chat-completions endpoint on loopback that records every request it answers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, object]] = []
        self.auth: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.auth.append(self.headers.get("Authorization"))
                prompt = body["messages"][0]["content"]
                if prompt.startswith("Rate"):
                    content = "SCORE: 80\nthe outage and who follows it up"
                elif "community reports" in prompt:
                    content = "LLM-WRITTEN: an outage at Nordhaven and its owner."
                else:
                    content = "ANSWER: Tomasz Nowak follows up the Rotterdam outage."
                payload = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
                self.send_response(200 if self.path == "/v1/chat/completions" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def report_texts(graph) -> list[str]:
    rows = graph.catalog.connection().execute(
        "SELECT text FROM chunks WHERE kind = 'community_report'").fetchall()
    return [r[0] for r in rows]


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    server = ChatServer()
    yield server
    server.server.shutdown()


def test_configured_chat_model_writes_reports_and_answers_global_queries(
        tmp_path, make_graph, chat, monkeypatch):
    monkeypatch.setenv("DOCGRAPH_TEST_CHAT_KEY", "sk-test")
    graph = make_graph(llm={"base_url": chat.url, "model": "tiny-chat",
                            "api_key_env": "DOCGRAPH_TEST_CHAT_KEY"})
    assert graph.chat_model is not None and graph.chat_model.name == "tiny-chat"
    graph.index(write_files(tmp_path / "ops", DOCS), namespace="ops")
    reports = report_texts(graph)
    assert reports and all("LLM-WRITTEN" in text for text in reports)
    assert {r["model"] for r in chat.requests} == {"tiny-chat"}
    assert set(chat.auth) == {"Bearer sk-test"}

    result = graph.retrieve("who follows up the outage", namespaces={"ops"}, k=1, mode="global")
    assert result.answer == "ANSWER: Tomasz Nowak follows up the Rotterdam outage."


def test_without_llm_settings_reports_stay_extractive(tmp_path, make_graph):
    graph = make_graph()
    assert graph.chat_model is None
    graph.index(write_files(tmp_path / "ops", DOCS), namespace="ops")
    reports = report_texts(graph)
    assert reports and not any("LLM-WRITTEN" in text for text in reports)


@pytest.mark.parametrize("half", [{"base_url": "http://127.0.0.1:9/v1"}, {"model": "m"}])
def test_half_an_llm_configuration_is_refused_naming_both_keys(half):
    with pytest.raises(ConfigError, match=r"llm\.base_url and llm\.model"):
        load_settings(llm=half)
