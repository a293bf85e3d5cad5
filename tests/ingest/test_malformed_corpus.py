"""One folder of malformed, hostile and oddly named files beside good ones, built at test time.

Every bad file is reported exactly once (one failure record naming it, with its reason), none
is fatal, every good file beside them is indexed and searchable, files that vanish mid-crawl
are treated as deleted, and a second build over the same folder changes nothing and reports
the same set.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import stat
import unicodedata
import zipfile
from collections.abc import Callable
from pathlib import Path

from tests import malformed

SYMLINK = r"^skipped: symlink \(not followed\)$"
TOO_LARGE_UNPACKED = r"too large: .*loader\.max_unpacked_bytes"
LIMITS = {"max_file_bytes": 2 << 20, "max_unpacked_bytes": 4 << 20, "max_text_chars": 1_000_000}
DEEP = "deep/" + "/".join(["d"] * 99)  # a folder at the deepest level that is still walked


def _token(i: int) -> str:
    """A word that occurs in exactly one good file."""
    return "tok" + "".join(chr(97 + (i // 26 ** k) % 26) for k in range(3)) + "q"


def _good_files() -> dict[bytes, tuple[bytes, str]]:
    """Raw file name -> (content, stored path) of files that must be indexed."""
    contents: list[tuple[bytes, Callable[[str], bytes], str | None]] = [
        (b"good.md", lambda t: f"# Good\n\nThe {t} note.\n".encode(), None),
        (b"good.txt", lambda t: f"Plain {t} text.\n".encode(), None),
        (b"good.html", lambda t: f"<html><body><p>The {t} page.</p></body></html>".encode(), None),
        (b"good.pdf", lambda t: malformed.text_pdf(f"The {t} manual"), None),
        (b"good.docx", lambda t: malformed.docx([f"The {t} minutes."]), None),
        (b"good.csv", lambda t: f"site,note\nRotterdam,{t}\n".encode(), None),
        (b"good.json", lambda t: json.dumps({"title": "Good", "note": t}).encode(), None),
        (b"with space.md", lambda t: f"{t} spaced\n".encode(), None),
        (unicodedata.normalize("NFC", "café-nfc.md").encode(), lambda t: t.encode(), None),
        (unicodedata.normalize("NFD", "naïve-nfd.md").encode(), lambda t: t.encode(), None),
        (b"hash#tag.md", lambda t: t.encode(), None),
        (b"percent%41.md", lambda t: t.encode(), None),
        (b"question?.md", lambda t: t.encode(), None),
        (b"-leading-dash.md", lambda t: t.encode(), None),
        (b"new\nline.md", lambda t: t.encode(), None),
        (b"l" * 252 + b".md", lambda t: t.encode(), None),  # NAME_MAX (255 bytes)
        ("é".encode() * 126 + b".md", lambda t: t.encode(), None),  # 255 bytes, 129 characters
        (b"bad\xffname.md", lambda t: t.encode(), "bad%FFname.md"),  # not UTF-8
        (b"caf\xe9 100%.md", lambda t: t.encode(), "caf%E9 100%25.md"),  # latin-1 name
        (b"latin1.txt", lambda t: f"Crème brûlée {t}".encode("latin-1"), None),
        (b"utf16-bom.txt", lambda t: f"Œuvre {t}".encode("utf-16"), None),
        (b"utf16-nobom.txt", lambda t: f"Déjà {t}".encode("utf-16-le"), None),
        (b"bad-utf8.md", lambda t: f"Zürich {t} ".encode() + b"\xc3\x28\xff", None),
        (b"nul-inside.txt", lambda t: b"word " * 1000 + f"\x00{t}\x00".encode(), None),
        (b"huge-line.txt", lambda t: f"{t} ".encode() + b"lorem ipsum dolor " * 33_000, None),
        (b"truncated.md", lambda t: f"# Cut\n\nThe {t} text is cut mid-wo".encode(), None),
        (b"truncated.html", lambda t: f"<html><body><p>{t} cut <b".encode(), None),
        (b"truncated.csv", lambda t: f"a,b\n{t},x\n\"open".encode(), None),
        (b"deep-spans.html", lambda t: b"<p>" + b"<span>" * 5000 + t.encode(), None),
        (b"nested.json", lambda t: b'{"a":' * 500 + json.dumps(t).encode() + b"}" * 500, None),
        (f"{DEEP}/ok.md".encode(), lambda t: t.encode(), None),
        (b"zzz-after-vanished.md", lambda t: f"After the vanished {t}.".encode(), None),
    ]
    return {raw: (make(_token(i)), stored or os.fsdecode(raw))
            for i, (raw, make, stored) in enumerate(contents)}


def _bad_files() -> dict[str, tuple[bytes, str]]:
    """File name -> (content, pattern its one failure reason must match)."""
    noise = random.Random(5).randbytes(5000)
    nfc = unicodedata.normalize("NFC", "résumé.md")
    return {
        "!empty.txt": (b"", "no text found"),
        "empty.md": (b"", "no text found"),
        "empty.html": (b"", "no text found"),
        "empty.pdf": (b"", "not a readable PDF"),
        "empty.docx": (b"", "not a zip archive"),
        "empty.csv": (b"", "empty CSV"),
        "empty.json": (b"", "invalid JSON"),
        "whitespace.md": (b" \n\t\n", "no text found"),
        "text-as.pdf": (b"just some text, no PDF here", "not a readable PDF"),
        "text-as.docx": (b"just some text, no zip here", "not a zip archive"),
        "zip-not-docx.docx": (_zip({"hello.txt": b"hi"}), "not a readable DOCX"),
        "truncated.pdf": (malformed.text_pdf("cut short")[:300], "not a readable PDF"),
        "truncated.docx": (malformed.docx(["cut short"])[:4000], "not a zip archive"),
        "truncated.json": (b'{"a": [1, 2', "invalid JSON"),
        "binary.md": (noise, "looks binary"),
        "binary.txt": (noise, "looks binary"),
        "binary.html": (noise, "looks binary"),
        "controls.txt": (bytes(range(1, 32)) * 50, r"looks binary \(control characters\)"),
        "bomb.docx": (malformed.docx_with_member("word/document.xml", 16 << 20),
                      TOO_LARGE_UNPACKED),
        "media-bomb.docx": (malformed.docx_with_member("word/media/image1.png", 16 << 20),
                            TOO_LARGE_UNPACKED),
        "many-members.docx": (malformed.zip_with_members(10_001), "archive lists 10001 members"),
        "flate-bomb.pdf": (malformed.pdf([b" " * (16 << 20)]), TOO_LARGE_UNPACKED),
        "many-pages.pdf": (malformed.pdf([b" " * (3 << 20)] * 3), TOO_LARGE_UNPACKED),
        "encrypted.pdf": (malformed.encrypted_pdf(), "PDF is encrypted"),
        "blank.pdf": (malformed.pdf([b""]), "no extractable text"),
        "too-many-chars.txt": (b"word " * 250_000, r"loader\.max_text_chars \(1000000\)"),
        "too-big.md": (b"x" * (3 << 20), r"too large: file is \d+ bytes, over loader\.max_file"),
        "deep.json": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        "deep.html": (b"<div>" * 20_000 + b"x" + b"</div>" * 20_000, "nested too deeply"),
        "deep-quote.md": (b">" * 100_000 + b" quoted\n", "no text found"),
        "huge-int.json": (b"1" * 10_000, "cannot extract"),
        "huge-field.csv": (b"a,b\n" + b"x" * 200_000 + b",y\n", "field larger than field limit"),
        "scripts-only.html": (b"<html><script>var x = 1;</script></html>", "no text found"),
        nfc: (b"NFC twin", r"same document id as .re\\u0301sume\\u0301\.md. \(the names are equal"),
    }


def _zip(members: dict[str, bytes]) -> bytes:
    import io

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def _write(folder: Path, raw: bytes, data: bytes) -> None:
    path = os.fsencode(folder) + b"/" + raw
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _special_files(folder: Path, outside: Path) -> dict[str, str]:
    """Symlinks, FIFOs, sockets, devices and a too-deep folder; name -> reason pattern."""
    (folder / "out.md").symlink_to(outside / "secret.md")
    (folder / "inside.md").symlink_to("good.md")
    (folder / "shared").symlink_to(outside)
    (folder / "loop1.md").symlink_to("loop2.md")
    (folder / "loop2.md").symlink_to("loop1.md")
    (folder / "self.md").symlink_to("self.md")
    (folder / "dangling.md").symlink_to("nowhere.md")
    os.mkfifo(folder / "fifo.md")
    expected = {name: SYMLINK for name in
                ("out.md", "inside.md", "shared", "loop1.md", "loop2.md", "self.md",
                 "dangling.md")}
    expected["fifo.md"] = r"^skipped: FIFO \(not a regular file\)$"
    expected["sock.md"] = r"^skipped: socket \(not a regular file\)$"
    try:  # a device node needs CAP_MKNOD; where it is missing the corpus has one kind less
        os.mknod(folder / "device.md", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        expected["device.md"] = r"^skipped: character device \(not a regular file\)$"
    except (PermissionError, OSError):
        pass
    too_deep = f"{DEEP}/d"
    _write(folder, f"{too_deep}/lost.md".encode(), b"below the deepest walked level")
    expected[too_deep] = r"^skipped: folder nested more than 100 levels deep$"
    return expected


def test_malformed_corpus_is_reported_once_and_never_fatal(
        tmp_path, make_graph, embedder, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nThe zebra password is hunter2.\n")
    folder = tmp_path / "corpus"
    folder.mkdir()
    good = _good_files()
    bad = {name: reason for name, (_, reason) in _bad_files().items()}
    for raw, (data, _) in good.items():
        _write(folder, raw, data)
    for name, (data, _) in _bad_files().items():
        _write(folder, name.encode(), data)
    _write(folder, unicodedata.normalize("NFD", "résumé.md").encode(), b"NFD twin: indexed")
    bad.update(_special_files(folder, outside))
    vanishing = [f"zz-vanish-{i}.md" for i in range(4)]  # more than the breaker allows
    for name in vanishing:
        _write(folder, name.encode(), b"gone before it is read")
    monkeypatch.chdir(folder)  # a socket path must be short: bind it relative to the folder
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock.md")
    assert len(bad) + len(good) >= 40

    def vanish(progress: object) -> None:  # the first file ("!empty.txt") is done: delete
        for name in vanishing:
            (folder / name).unlink(missing_ok=True)

    graph = make_graph(loader={"workers": 2, **LIMITS})
    try:
        first = graph.index(folder, namespace="c", progress=vanish)
        embedded = embedder.embedded
        second = graph.index(folder, namespace="c")
        embedded_again = embedder.embedded
    finally:
        sock.close()

    # Each bad file: reported once, with its reason; nothing else failed.
    failed = [path for path, _ in first.failed]
    assert sorted(failed) == sorted(set(failed)), "a file was reported twice"
    assert set(failed) == set(bad), (set(failed) ^ set(bad))
    for path, reason in first.failed:
        assert re.search(bad[path], reason), (path, reason)
    records = {f.path: f.reason for f in graph.status().failures}
    assert records == dict(first.failed)

    assert first.workers == 2  # extracted in worker processes, as in any bulk build
    # Files that vanished mid-crawl are not failures, and did not stop the good ones.
    assert first.vanished == vanishing
    stored = {stored for _, stored in good.values()}
    nfd_twin = unicodedata.normalize("NFD", "résumé.md")
    assert set(first.added) == stored | {nfd_twin}
    for raw, (_, path) in good.items():
        token = _token(list(good).index(raw))
        hits = graph.search(token, namespaces={"c"}, k=3)
        assert any(h.source_path == path for h in hits), (path, token)
    assert all(h.source_path != "out.md" and "hunter2" not in h.text
               for h in graph.search("zebra password hunter2", namespaces={"c"}, k=10))

    # A second build changes nothing and reports the same set.
    assert not (second.added or second.updated or second.removed or second.vanished)
    assert embedded_again == embedded
    assert second.unchanged == len(first.added)
    assert sorted(second.failed) == sorted(first.failed)
    assert {f.path: f.reason for f in graph.status().failures} == records


def test_corpus_generators_make_what_they_claim():
    """The generators themselves: the good PDF and DOCX really hold their text."""
    from docgraph.ingest.extract import extract

    assert extract(malformed.text_pdf("kestrel"), "a.pdf").blocks[0].text == "kestrel"
    assert extract(malformed.docx(["heron"]), "a.docx").blocks[0].text == "heron"
