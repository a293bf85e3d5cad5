"""Who may read a local file by its POSIX owner, group, mode bits and ACL: read from real
files (ACLs set with the real ``setfacl``), mapped to principals, followed by builds (a
chmod is picked up at the next build without re-embedding) and enforced by governance."""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.serve.tools import DocgraphTools
from docgraph.sources.posix_access import ACL_XATTR, PosixReaders, parse_acl
from tests.helpers import write_files
from tests.programs import which_or_skip

ME, MY_GROUP = os.getuid(), os.getgid()
MY_NAME, MY_GROUP_NAME = pwd.getpwuid(ME).pw_name, grp.getgrgid(MY_GROUP).gr_name
#: A user and a group other than ours that exist on every Debian machine.
NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrnam("nogroup")


def _file(tmp_path: Path, name: str, mode: int) -> str:
    path = tmp_path / name
    path.write_text("text\n")
    path.chmod(mode)
    return str(path)


def _readers(path: str, principal_map: dict[str, str] | None = None) -> object:
    info = os.stat(path)
    return PosixReaders(principal_map).readers(path, info.st_mode, info.st_uid, info.st_gid)


def test_mode_bits_name_the_owner_and_group_who_may_read(tmp_path):
    assert _readers(_file(tmp_path, "world.txt", 0o644)) is None  # others may: everyone
    assert _readers(_file(tmp_path, "team.txt", 0o640)) == {f"user:{MY_NAME}",
                                                            f"group:{MY_GROUP_NAME}"}
    assert _readers(_file(tmp_path, "mine.txt", 0o600)) == {f"user:{MY_NAME}"}
    assert _readers(_file(tmp_path, "group.txt", 0o040)) == {f"group:{MY_GROUP_NAME}"}
    assert _readers(_file(tmp_path, "none.txt", 0o200)) == frozenset()  # nobody
    # mapped to the identity provider's names, by id or by name
    mapped = {f"uid:{ME}": "user:alice@example.com", f"group:{MY_GROUP_NAME}": "group:eng"}
    assert _readers(str(tmp_path / "team.txt"), mapped) == {"user:alice@example.com",
                                                            "group:eng"}


def test_an_acl_set_with_setfacl_adds_its_named_readers_under_its_mask(tmp_path):
    setfacl = which_or_skip("setfacl", "Debian: apt-get install acl; .ci/run does")
    path = _file(tmp_path, "acl.txt", 0o600)
    subprocess.run([setfacl, "-m", f"u:{NOBODY.pw_name}:r,g:{NOGROUP.gr_name}:r", path],
                   check=True)
    entries = parse_acl(os.getxattr(path, ACL_XATTR))
    assert {e.id for e in entries if e.tag in (0x02, 0x08)} == {NOBODY.pw_uid, NOGROUP.gr_gid}
    assert _readers(path) == {f"user:{MY_NAME}", "user:nobody", "group:nogroup"}
    # the mask limits named entries and the owning group, never the owner
    subprocess.run([setfacl, "-m", "m::---", path], check=True)
    assert _readers(path) == {f"user:{MY_NAME}"}
    # others may read: everyone, whatever the ACL names
    subprocess.run([setfacl, "-m", "o::r", path], check=True)
    assert _readers(path) is None


def test_a_malformed_acl_is_refused_not_guessed():
    with pytest.raises(ValueError, match="not a whole number of entries"):
        parse_acl(b"\x02\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="version 1"):
        parse_acl(b"\x01\x00\x00\x00")


def test_posix_permissions_follow_builds_and_decide_what_callers_see(tmp_path, make_graph,
                                                                      embedder):
    folder = write_files(tmp_path / "share", {
        "plan.md": "# Plan\n\nThe Tern T3 codeword is Zephyrquartz.\n",
        "open.md": "# Open\n\nThe Tern T3 ships in May.\n",
        ".docgraph-access.yaml": "files:\n  open.md: [group:everyone]\n",
    })
    (folder / "plan.md").chmod(0o600)
    (folder / "open.md").chmod(0o600)  # the sidecar rule wins over the bits
    graph = make_graph(sources={"posix_permissions": [str(folder)],
                                "principal_map": {f"uid:{ME}": "user:alice"}})
    graph.index(folder, namespace="ops")
    stored = {d.path: d.access for d in graph.store.documents_for_source(
        graph.store.list_sources()[0]).values()}
    assert stored == {"plan.md": {"user:alice"}, "open.md": {"group:everyone"}}
    tools = DocgraphTools(Governance(graph, StaticEntitlements(
        [RoleAssignment(u, "agent", "ops") for u in ("alice", "bob")],
        members={"everyone": ["alice", "bob"]})))

    def sees(user: str) -> bool:
        return "Zephyrquartz" in json.dumps(tools.call(
            "search_documents", Caller(user), {"query_text": "Tern T3 codeword", "k": 5}))

    assert sees("alice") and not sees("bob")
    # chmod o+r: everyone with the namespace, at the next build, nothing re-embedded
    embedded = embedder.embedded
    (folder / "plan.md").chmod(0o644)
    report = graph.index(folder, namespace="ops")
    assert report.access_changed == 1 and report.passages_embedded == 0
    assert embedder.embedded == embedded and sees("bob")
    (folder / "plan.md").chmod(0o600)
    graph.index(folder, namespace="ops")
    assert not sees("bob") and sees("alice")


def test_a_folder_not_listed_keeps_the_namespace_rule(tmp_path, make_graph):
    folder = write_files(tmp_path / "share", {"plan.md": "# Plan\n\nZephyrquartz.\n"})
    (folder / "plan.md").chmod(0o600)
    graph = make_graph(sources={"posix_permissions": [str(tmp_path / "elsewhere")]})
    graph.index(folder, namespace="ops")
    (document,) = graph.store.documents_for_source(graph.store.list_sources()[0]).values()
    assert document.access is None


@pytest.mark.parametrize("mapping, named", [
    ({"uid:x": "user:a"}, "uid:x"), ({"login:bob": "user:a"}, "login:bob"),
    ({"uid:1": "alice"}, "'alice' is not user:<id> or group:<name>")])
def test_a_bad_principal_map_is_refused_naming_the_entry(mapping, named):
    from docgraph.config import load_settings
    from docgraph.errors import ConfigError

    with pytest.raises(ConfigError, match=f"sources.principal_map.*{named}"):
        load_settings(sources={"principal_map": mapping})
