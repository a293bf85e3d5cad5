"""Folder URN normalization: every spelling of one folder gives one URN, and distinct folders
never share one (document identity is built on it)."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docgraph.errors import SourceError
from docgraph.model import urn_scheme
from docgraph.sources.urn import document_id, normalize_urn


def _file_urn(path: Path) -> str:
    """The expected URN spelled out by hand, for paths made only of URL-safe characters."""
    return "file://" + path.resolve().as_posix()


# -- local paths -------------------------------------------------------------------------


def test_relative_and_absolute_paths_give_the_same_file_urn(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    expected = _file_urn(tmp_path / "docs")
    assert normalize_urn("docs") == expected
    assert normalize_urn("./docs") == expected
    assert normalize_urn(tmp_path / "docs") == expected
    assert normalize_urn(str(tmp_path / "docs")) == expected
    assert normalize_urn("file://" + str(tmp_path.resolve() / "docs")) == expected
    assert normalize_urn("file://localhost" + str(tmp_path.resolve() / "docs")) == expected
    assert expected.startswith("file:///")
    assert urn_scheme(expected) == "file"


def test_trailing_slashes_and_surrounding_whitespace_are_dropped(tmp_path):
    expected = _file_urn(tmp_path / "docs")
    assert normalize_urn(f"{tmp_path}/docs/") == expected
    assert normalize_urn(f"{tmp_path}/docs///") == expected
    assert normalize_urn(f"  {tmp_path}/docs  ") == expected
    assert normalize_urn(f"file://{tmp_path.resolve()}/docs/") == expected
    assert not expected.endswith("/")


def test_dot_and_dotdot_segments_are_resolved(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    expected = _file_urn(tmp_path / "a")
    assert normalize_urn(f"{tmp_path}/a/./b/..") == expected
    assert normalize_urn(f"{tmp_path}/a/b/../../a") == expected
    assert normalize_urn(f"file://{tmp_path.resolve()}/a/b/../.") == expected
    assert "/./" not in expected and "/../" not in expected


def test_symlinked_folder_resolves_to_its_target(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    assert normalize_urn(link) == normalize_urn(real) == _file_urn(real)
    assert normalize_urn(link).endswith("/real")


def test_root_folder_keeps_its_slash():
    assert normalize_urn("/") == "file:///"
    assert normalize_urn("file:///") == "file:///"


def test_percent_encoding_is_canonical(tmp_path):
    base = tmp_path.resolve().as_posix()
    tilde = normalize_urn(f"file://{base}/~user")
    assert tilde.endswith("/~user")  # unreserved characters are never escaped
    assert normalize_urn(f"file://{base}/%7Euser") == tilde
    assert normalize_urn(f"file://{base}/%7euser") == tilde
    assert normalize_urn(tmp_path / "~user") == tilde

    upper = normalize_urn(f"file://{base}/caf%C3%A9")
    assert upper.endswith("/caf%C3%A9")
    assert normalize_urn(f"file://{base}/caf%c3%a9") == upper  # hex digits upper-cased


def test_space_and_non_ascii_names_are_percent_encoded(tmp_path):
    base = tmp_path.resolve().as_posix()
    urn = normalize_urn(tmp_path / "my docs" / "日本")
    assert urn == f"file://{base}/my%20docs/%E6%97%A5%E6%9C%AC"
    assert normalize_urn(f"file://{base}/my%20docs/日本") == urn
    assert " " not in urn


def test_nfc_and_nfd_spellings_of_a_name_give_one_urn(tmp_path):
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    urn = normalize_urn(tmp_path / nfc)
    assert normalize_urn(tmp_path / nfd) == urn
    assert urn.endswith("/caf%C3%A9")
    base = tmp_path.resolve().as_posix()
    assert normalize_urn(f"file://{base}/cafe%CC%81") == urn  # NFD, percent-encoded


def test_a_literal_percent_in_a_folder_name_is_not_decoded(tmp_path):
    # 'a%20b' and 'a b' are two different folders; decoding a local path (or decoding a
    # file: URN twice) would give them one URN and index one over the other.
    literal = normalize_urn(tmp_path / "a%20b")
    assert literal != normalize_urn(tmp_path / "a b")
    assert literal.endswith("/a%2520b")
    assert normalize_urn(literal) == literal
    assert normalize_urn(tmp_path / "100%") != normalize_urn(tmp_path / "100%25")


_NAME_CHARS = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/")


@settings(max_examples=100, deadline=None)
@given(name=st.text(_NAME_CHARS, min_size=1, max_size=12))
def test_file_urn_decodes_back_to_the_path_and_is_idempotent(tmp_path_factory, name):
    base = tmp_path_factory.getbasetemp().resolve()
    folder = base / f"n{name}z"  # never '.', '..', '~...' or surrounding whitespace
    urn = normalize_urn(folder)
    assert unquote(urn.removeprefix("file://")) == unicodedata.normalize("NFC", folder.as_posix())
    assert normalize_urn(urn) == urn


# -- remote schemes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("SFTP://Files.Example.COM/Data/Reports", "sftp://files.example.com/Data/Reports"),
        ("sftp://host:22/x", "sftp://host/x"),
        ("ftp://host:21/x", "ftp://host/x"),
        ("hdfs://namenode:8020/warehouse/", "hdfs://namenode/warehouse"),
        ("sftp://host:2222/x", "sftp://host:2222/x"),
        ("ftp://host:2121/x", "ftp://host:2121/x"),
        ("hdfs://namenode:9000/x", "hdfs://namenode:9000/x"),
        ("sftp://host:21/x", "sftp://host:21/x"),  # ftp's default port is not sftp's
        ("s3://Bucket/a/../b/", "s3://bucket/b"),
        ("s3://bucket/a/./b//", "s3://bucket/a/b"),
        ("s3://bucket/", "s3://bucket"),
        ("s3://bucket", "s3://bucket"),
        ("sftp://host/%7Euser/My%20Docs", "sftp://host/~user/My%20Docs"),
        ("sftp://host/~user/My Docs", "sftp://host/~user/My%20Docs"),
        ("sftp://host/caf%c3%a9", "sftp://host/caf%C3%A9"),
        ("sftp://host/a%2541", "sftp://host/a%2541"),  # '%41' literally, decoded once only
        ("sftp://[::1]:2222/x", "sftp://[::1]:2222/x"),
        ("sftp://[::1]:22/x", "sftp://[::1]/x"),
    ],
)
def test_remote_urns_are_normalized(raw, expected):
    assert normalize_urn(raw) == expected
    assert normalize_urn(expected) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "sftp://user:pw@Host/x",
        "sftp://user@host/x",
        "ftp://user:pw@host:21/x",
        "s3://user:pw@bucket/x",
    ],
)
def test_credentials_are_stripped(raw):
    urn = normalize_urn(raw)
    assert "user" not in urn
    assert "pw" not in urn
    assert "@" not in urn
    assert urn.endswith("/x")


def test_nfc_and_nfd_remote_paths_give_one_urn():
    nfc = normalize_urn("sftp://host/" + unicodedata.normalize("NFC", "résumé"))
    nfd = normalize_urn("sftp://host/" + unicodedata.normalize("NFD", "résumé"))
    assert nfc == nfd == "sftp://host/r%C3%A9sum%C3%A9"


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ["http://example.com/docs", "https://example.com/docs", "gopher://h/x", "smb://srv/share"],
)
def test_unsupported_scheme_raises_naming_the_input(raw):
    with pytest.raises(SourceError) as info:
        normalize_urn(raw)
    assert raw in str(info.value)
    assert "unsupported" in str(info.value)


@pytest.mark.parametrize("raw", ["", "   ", "\n\t"])
def test_empty_input_raises(raw):
    with pytest.raises(SourceError, match="empty"):
        normalize_urn(raw)


@pytest.mark.parametrize(
    "raw", ["s3:///just-a-path", "sftp:///x", "file://fileserver/share", "sftp://host:99999/x"]
)
def test_missing_host_remote_file_host_or_bad_port_raises_naming_the_input(raw):
    with pytest.raises(SourceError) as info:
        normalize_urn(raw)
    assert raw in str(info.value)


# -- document identity ---------------------------------------------------------------------


def test_document_id_joins_folder_urn_and_relative_path():
    urn = "sftp://host/docs"
    assert document_id(urn, "guide.md") == "sftp://host/docs/guide.md"
    assert document_id(urn, "sub/dir/guide.md") == "sftp://host/docs/sub/dir/guide.md"
    assert document_id(urn, "sub\\dir\\guide.md") == "sftp://host/docs/sub/dir/guide.md"
    assert document_id(urn, "./sub//x/../guide.md") == "sftp://host/docs/sub/guide.md"
    assert document_id(urn, "my notes/é.md") == "sftp://host/docs/my%20notes/%C3%A9.md"


def test_document_id_is_the_same_for_nfc_and_nfd_names():
    urn = "file:///srv/docs"
    nfc = document_id(urn, unicodedata.normalize("NFC", "café.md"))
    assert document_id(urn, unicodedata.normalize("NFD", "café.md")) == nfc


def test_document_id_keeps_distinct_names_distinct():
    urn = "file:///srv/docs"
    assert document_id(urn, "100%.md") != document_id(urn, "100%25.md")
    assert document_id(urn, "a b.md") != document_id(urn, "a%20b.md")


@pytest.mark.parametrize("rel", ["../escape.md", "..", "a/../../escape.md", "", ".", "a/.."])
def test_document_id_rejects_paths_outside_the_folder(rel):
    with pytest.raises(SourceError) as info:
        document_id("file:///srv/docs", rel)
    assert repr(rel) in str(info.value)


@pytest.mark.parametrize(("name", "expected"), [
    ("guide.md", "guide.md"),
    ("notes 100%.md", "notes%20100%25.md"),
    ("hash#tag?.md", "hash%23tag%3F.md"),
    ("-dash [1] {x}.md", "-dash%20%5B1%5D%20%7Bx%7D.md"),
    ("Gdańsk/résumé.md", "Gda%C5%84sk/r%C3%A9sum%C3%A9.md"),
    ("new\nline.md", "new%0Aline.md"),
])
def test_document_ids_of_valid_names_stay_as_they_were(name, expected):
    """Ids are stored identities: the escaping of undecodable names changes none of these."""
    assert document_id("file:///srv/docs", name) == f"file:///srv/docs/{expected}"


def test_an_undecodable_name_gets_a_stable_reversible_id_and_stored_path():
    from urllib.parse import unquote_to_bytes

    from docgraph.sources.urn import escape_name

    raw = b"dir\xfe/bad\xff 100%.md"
    listed = os.fsdecode(raw)  # what a directory listing gives: surrogate escapes
    doc_id = document_id("file:///srv/docs", listed)
    assert doc_id == "file:///srv/docs/dir%FE/bad%FF%20100%25.md"
    assert unquote_to_bytes(doc_id.removeprefix("file:///srv/docs/")) == raw
    shown = escape_name(listed)
    assert shown == "dir%FE/bad%FF 100%25.md"  # storable text; '%' escaped too, so
    assert unquote_to_bytes(shown) == raw  # it decodes back to the raw name exactly
    assert escape_name("plain 100%.md") == "plain 100%.md"  # valid names are untouched
