"""Remote document folders against real servers on 127.0.0.1: FTP (pyftpdlib), SFTP (an
asyncssh server; docgraph's client is fsspec's paramiko SFTP) and S3 (moto in server mode).

For each: add a folder, index, edit a file remotely -> only it is fetched and re-embedded;
delete -> gone; an unchanged rerun fetches no body (the servers count what they serve) and
embeds nothing; a server that goes down mid-build fails that source's crawl phase with a
clear error while the other sources complete and the old content stays searchable.

hdfs is reached only through fsspec's interface (pyarrow's HadoopFileSystem) and is not
exercised here: it needs a Hadoop cluster and libhdfs, which this machine cannot run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from docgraph.sources.credentials import credential_key
from docgraph.sources.urn import normalize_urn
from tests.helpers import write_files
from tests.servers import PASSWORD, USER, FtpServer, S3Server, SftpServer

FILES = {
    "leave.md": "# Leave\n\n## Parental leave\n\nStaff get twenty weeks of parental leave.\n",
    "robots/kestrel.txt": "The Kestrel K2 picker runs firmware 4.2.1.\n\nError E-417 means the "
    "lidar is blocked.\n",
    "notes.md": "# Standup\n\nTicket OPS-1432 is closed; the Rotterdam depot reopened.\n",
}


@dataclass
class Remote:
    """A folder on a running server, and how to change it behind docgraph's back."""

    scheme: str
    urn: str
    server: Any
    root: Path | None = None  # the served directory (ftp, sftp)
    bucket: str = ""
    edits: int = field(default=0)

    def write(self, rel: str, text: str) -> None:
        self.edits += 1
        if self.root is not None:
            path = self.root / "docs" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            # A settled timestamp (older than the racy window), distinct for every edit.
            when = time.time() - 600 + 10 * self.edits
            import os

            os.utime(path, (when, when))
        else:
            self.server.client().put_object(Bucket=self.bucket, Key=f"docs/{rel}",
                                            Body=text.encode())

    def delete(self, rel: str) -> None:
        if self.root is not None:
            (self.root / "docs" / rel).unlink()
        else:
            self.server.client().delete_object(Bucket=self.bucket, Key=f"docs/{rel}")


@pytest.fixture(params=["ftp", "sftp", "s3"])
def remote(request: pytest.FixtureRequest, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Remote]:
    scheme = request.param
    if scheme == "s3":
        server: Any = S3Server()
        bucket = f"docs-{uuid.uuid4().hex[:10]}"
        server.client().create_bucket(Bucket=bucket)
        found = Remote(scheme, normalize_urn(f"s3://{bucket}/docs"), server, bucket=bucket)
        key = credential_key(found.urn)
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_KEY", "test")
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_SECRET", "test")
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_ENDPOINT_URL", server.endpoint)
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_REGION", "us-east-1")
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_RETRIES", "1")
    else:
        root = tmp_path / "served"
        (root / "docs").mkdir(parents=True)
        server = FtpServer(root) if scheme == "ftp" else SftpServer(root)
        found = Remote(scheme, normalize_urn(f"{server.url}/docs"), server, root=root)
        key = credential_key(found.urn)
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_USERNAME", USER)
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_PASSWORD", PASSWORD)
        if scheme == "sftp":
            monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_LOOK_FOR_KEYS", "false")
            monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_ALLOW_AGENT", "false")
    monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_TIMEOUT", "5")
    for rel, text in FILES.items():
        found.write(rel, text)
    try:
        yield found
    finally:
        server.stop()


def _access(graph: Any) -> dict[str, Any]:
    """Each document's stored permission set, by path."""
    return {d.path: d.access for s in graph.catalog.list_sources()
            for d in graph.catalog.documents_for_source(s).values()}


def _paths(graph: Any, namespace: str) -> set[str]:
    """Paths of the documents (not community reports) of a namespace."""
    return {d.path for s in graph.catalog.list_sources() if s.namespace == namespace
            for d in graph.catalog.documents_for_source(s).values()}


def _only_build(result: Any, namespace: str) -> Any:
    (build,) = [b for b in result.builds if b.namespace == namespace]
    return build


def _phase(build: Any, source: str, phase: str) -> Any:
    (found,) = [p for p in build.phases if p.source == source and p.phase == phase]
    return found


def test_remote_folder_lifecycle(remote, make_graph, embedder):
    graph = make_graph()
    graph.sources.add_folder(remote.urn, "remote")

    first = graph.refresher.run_once()
    build = _only_build(first, "remote")
    assert build.outcome == "ok", build.phases
    (report,) = first.reports
    assert sorted(report.added) == sorted(FILES)
    assert remote.server.bodies_served == 3
    assert graph.search("parental leave weeks", namespaces={"remote"}, k=1)[0].source_path \
        == "leave.md"
    assert graph.catalog.embedding_model() is not None

    # Unchanged rerun: no body fetched, nothing embedded.
    served, embedded = remote.server.bodies_served, embedder.embedded
    (report,) = graph.refresher.run_once().reports
    assert remote.server.bodies_served == served, "unchanged files were fetched again"
    assert embedder.embedded == embedded
    assert report.unchanged == 3 and report.bodies_read == 0

    # Edit one file remotely: only it is fetched and re-embedded.
    remote.write("robots/kestrel.txt", "The Kestrel K2 picker runs firmware 4.2.1.\n\n"
                 "Error E-417 means the lidar is blocked by frost on the dome.\n")
    (report,) = graph.refresher.run_once().reports
    assert report.updated == ["robots/kestrel.txt"] and not report.added and not report.removed
    assert remote.server.bodies_served == served + 1
    assert report.chunks_embedded >= 1
    assert embedder.embedded == embedded + report.chunks_embedded + sum(
        g.reports_embedded for g in graph.last_graph_reports)
    hits = graph.search("frost on the dome", namespaces={"remote"}, k=1)
    assert hits[0].source_path == "robots/kestrel.txt" and "frost" in hits[0].text

    # Delete remotely: the document and its chunks are gone.
    remote.delete("notes.md")
    (report,) = graph.refresher.run_once().reports
    assert report.removed == ["notes.md"]
    paths = _paths(graph, "remote")
    assert paths == {"leave.md", "robots/kestrel.txt"}
    assert all(h.source_path != "notes.md"
               for h in graph.search("Rotterdam depot OPS-1432", namespaces={"remote"}, k=5))

    # And unchanged again: zero fetches, zero embeddings.
    served, embedded = remote.server.bodies_served, embedder.embedded
    (report,) = graph.refresher.run_once().reports
    assert (remote.server.bodies_served, embedder.embedded) == (served, embedded)
    assert report.bodies_read == 0 and report.unchanged == 2

    # The same folder serves a second domain (one namespace each), via DocGraph.index.
    report = graph.index(remote.urn, "second")
    assert sorted(report.added) == ["leave.md", "robots/kestrel.txt"]
    assert _paths(graph, "second") == _paths(graph, "remote")


def test_server_down_mid_build_fails_that_source_only(remote, make_graph, tmp_path):
    graph = make_graph()
    local = write_files(tmp_path / "local", {"a.md": "# Alpha\n\nThe alpha runbook.\n"})
    graph.sources.add_folder(remote.urn, "remote")
    graph.sources.add_folder(local, "remote")
    assert _only_build(graph.refresher.run_once(), "remote").outcome == "ok"

    # Two remote edits and one local; the server dies after serving one more body.
    remote.write("leave.md", "# Leave\n\nStaff get thirty weeks of parental leave now.\n")
    remote.write("robots/kestrel.txt", "Kestrel K3 replaces the K2 picker.\n")
    (local / "b.md").write_text("# Beta\n\nThe beta runbook mentions Quasar.\n")
    remote.server.fail_after = remote.server.bodies_served + 1
    started = time.monotonic()
    result = graph.refresher.run_once()
    assert time.monotonic() - started < 30
    assert remote.server.down
    build = _only_build(result, "remote")
    assert build.outcome == "error"
    crawl = _phase(build, remote.urn, "crawl")
    assert crawl.outcome == "error"
    assert "could not be fetched" in crawl.message and remote.urn in crawl.message
    # The local source of the same namespace completed.
    assert _phase(build, normalize_urn(local), "crawl").outcome == "ok"
    assert graph.search("Quasar beta runbook", namespaces={"remote"}, k=1)[0].source_path \
        == "b.md"
    # Nothing of the remote source was deleted; what could not be fetched keeps its old text.
    paths = _paths(graph, "remote")
    assert {"leave.md", "robots/kestrel.txt", "notes.md", "a.md", "b.md"} <= paths
    old = graph.search("Kestrel K2 picker firmware lidar", namespaces={"remote"}, k=3)
    assert any(h.source_path == "robots/kestrel.txt" and "lidar" in h.text for h in old)

    # The failure is in the status, and the next build (server still down) fails at listing.
    (status,) = [s for s in graph.index_status() if s.namespace == "remote"]
    assert status.last_outcome == "error"
    assert any(p.phase == "crawl" and remote.urn in p.message for p in status.errors)
    assert status.staleness_seconds is not None  # measured from the last good build
    build = _only_build(graph.refresher.run_once(), "remote")
    crawl = _phase(build, remote.urn, "crawl")
    assert crawl.outcome == "error" and crawl.message
    assert _phase(build, remote.urn, "embed").outcome == "skipped"
    assert "notes.md" in _paths(graph, "remote")


def test_a_remote_file_deleted_after_listing_is_vanished_not_a_failed_fetch(remote, make_graph):
    from docgraph.errors import SourceFileVanished
    from docgraph.sources.folder import MAX_CONSECUTIVE_FETCH_FAILURES, FolderCrawler

    for i in range(MAX_CONSECUTIVE_FETCH_FAILURES):
        remote.write(f"extra-{i}.md", f"# Extra {i}\n\nMore text.\n")
    graph = make_graph()
    options = graph.sources.credentials.storage_options(remote.urn)
    with FolderCrawler(remote.urn, ["*.md", "*.txt"], options) as crawler:
        *gone, kept = list(crawler.list_files())
        assert len(gone) > MAX_CONSECUTIVE_FETCH_FAILURES
        for entry in gone:
            remote.delete(entry.relative_path)
        for entry in gone:
            with pytest.raises(SourceFileVanished, match="vanished during the crawl"):
                crawler.read(entry)
        # The server answered every time: the next read is tried (and succeeds), never
        # "not tried, the server stopped answering".
        assert crawler.read(kept)


def test_a_remote_folders_permission_sidecar_is_read_and_followed(remote, make_graph,
                                                                   embedder):
    # the sidecar is a hidden file: listed and read as rules on every scheme, never indexed
    remote.write(".docgraph-access.yaml", "files:\n  notes.md: [group:finance]\n")
    graph = make_graph()
    graph.sources.add_folder(remote.urn, "remote")
    (report,) = graph.refresher.run_once().reports
    assert sorted(report.added) == sorted(FILES) and not report.failed

    assert _access(graph) == {"leave.md": None, "robots/kestrel.txt": None,
                        "notes.md": frozenset({"group:finance"})}
    embedded = embedder.embedded
    remote.write(".docgraph-access.yaml", "access: [user:alice]\n")
    (report,) = graph.refresher.run_once().reports
    assert report.access_changed == 3 and report.unchanged == 3
    assert embedder.embedded == embedded  # nothing read as a document, nothing embedded
    assert set(_access(graph).values()) == {frozenset({"user:alice"})}


@pytest.mark.parametrize("remote", ["s3"], indirect=True)
def test_s3_object_tags_and_metadata_name_who_may_read_them(remote, make_graph, embedder):
    client, bucket = remote.server.client(), remote.bucket
    client.put_object_tagging(Bucket=bucket, Key="docs/notes.md", Tagging={"TagSet": [
        {"Key": "docgraph-readers", "Value": "group:finance user:alice"}]})
    client.put_object(Bucket=bucket, Key="docs/leave.md", Body=FILES["leave.md"].encode(),
                      Metadata={"docgraph-readers": "group:hr"})
    graph = make_graph(sources={"s3_permissions": [remote.urn]})
    graph.sources.add_folder(remote.urn, "remote")
    (report,) = graph.refresher.run_once().reports
    assert not report.failed

    assert _access(graph) == {"notes.md": {"group:finance", "user:alice"},
                        "leave.md": {"group:hr"}, "robots/kestrel.txt": None}
    # a tag changed at the source: the next refresh stores it, no object read again
    embedded = embedder.embedded
    client.put_object_tagging(Bucket=bucket, Key="docs/notes.md", Tagging={"TagSet": [
        {"Key": "docgraph-readers", "Value": "user:alice"}]})
    (report,) = graph.refresher.run_once().reports
    assert report.access_changed == 1 and report.bodies_read == 0  # tags read, not bodies
    assert embedder.embedded == embedded
    assert _access(graph)["notes.md"] == {"user:alice"}
    # a value naming something else fails closed: withheld, reported naming the key
    client.put_object_tagging(Bucket=bucket, Key="docs/notes.md", Tagging={"TagSet": [
        {"Key": "docgraph-readers", "Value": "alice"}]})
    (report,) = graph.refresher.run_once().reports
    failed = dict(report.failed)
    assert "docgraph-readers: 'alice' is not user:<id> or group:<name>" in failed["notes.md"]
    assert _access(graph)["notes.md"] == frozenset()


@pytest.mark.parametrize("remote", ["sftp"], indirect=True)
def test_an_sftp_folders_posix_modes_name_who_may_read_its_files(remote, make_graph,
                                                                 embedder):
    import os

    assert remote.root is not None
    (remote.root / "docs" / "notes.md").chmod(0o640)
    (remote.root / "docs" / "leave.md").chmod(0o600)
    me, group = os.getuid(), os.getgid()
    graph = make_graph(sources={"posix_permissions": [remote.urn], "principal_map": {
        f"uid:{me}": "user:alice", f"gid:{group}": "group:finance"}})
    graph.sources.add_folder(remote.urn, "remote")
    (report,) = graph.refresher.run_once().reports
    assert not report.failed

    # the server's ids, mapped; others-readable stays open; no ACL over SFTP
    assert _access(graph) == {"notes.md": {"user:alice", "group:finance"},
                        "leave.md": {"user:alice"}, "robots/kestrel.txt": None}
    embedded = embedder.embedded
    (remote.root / "docs" / "leave.md").chmod(0o644)  # a chmod on the server
    (report,) = graph.refresher.run_once().reports
    assert report.access_changed == 1 and report.bodies_read == 0
    assert embedder.embedded == embedded and _access(graph)["leave.md"] is None
