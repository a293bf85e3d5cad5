"""Mail: headers become metadata and a short heading, bodies lose quoted replies and
signatures, each message of a mailbox or exported thread is its own section, attachments
are extracted as documents of their own; indexed on every backend, none of the boilerplate
reaches a chunk."""

from __future__ import annotations

import hashlib
import json

import pytest

from docgraph.errors import ExtractionError
from docgraph.ingest.extract import extract
from docgraph.model import BlockKind
from tests import backend_graphs, office_fixtures
from tests.conftest import REPO
from tests.helpers import write_files
from tests.programs import assert_sample_build_failures

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

H, P, ROW = BlockKind.HEADING, BlockKind.PARAGRAPH, BlockKind.TABLE_ROW
CORPUS_THREAD = (REPO / "examples" / "corpus" / "support"
                 / "nordhaven-escalation-email-thread.txt")

REPLY_BODY = """\
Hi Joost,

The contact spring kit PLV-CS-220-B is fitted on dock D-14.

Kind regards,
Priya Raman
Head of Customer Support
+44 1908 555 0100

On Thu, 27 Mar 2025 at 09:12, Joost van Dijk <joost@nordhaven.example> wrote:
> Is dock D-14 fixed yet? QUOTED-MARKER
> Joost
"""

OUTLOOK_BODY = """\
Priya, the dock has run all night without E-508.

Thanks,
Joost

-----Original Message-----
From: Priya Raman
Sent: 28 March 2025 10:00
Subject: RE: Dock D-14
The kit is fitted. OUTLOOK-QUOTE-MARKER
"""


def _reply(attachments=None):
    return office_fixtures.mail_message(
        "Priya Raman <priya.raman@halyard.example>", "Joost van Dijk <joost@nordhaven.example>",
        "RE: Dock D-14 at Daventry", "Fri, 28 Mar 2025 10:00:00 +0100", REPLY_BODY,
        "<reply-1@halyard.example>", attachments, cc="support@halyard.example")


def _outlook_reply():
    return office_fixtures.mail_message(
        "Joost van Dijk <joost@nordhaven.example>", "Priya Raman <priya.raman@halyard.example>",
        "RE: RE: Dock D-14 at Daventry", "Sat, 29 Mar 2025 08:30:00 +0100", OUTLOOK_BODY,
        "<reply-2@nordhaven.example>")


def test_eml_headers_are_metadata_and_a_heading_not_body_text():
    document = extract(bytes(_reply()), "mail/dock.eml")
    assert document.title == "Dock D-14 at Daventry"
    assert document.media_type == "message/rfc822"
    assert document.metadata == {
        "from": "Priya Raman <priya.raman@halyard.example>",
        "to": "Joost van Dijk <joost@nordhaven.example>",
        "cc": "support@halyard.example",
        "date": "2025-03-28T10:00:00+01:00",
        "subject": "RE: Dock D-14 at Daventry",
        "message_id": "<reply-1@halyard.example>",
        # every address of every message, for folders whose mails only they may read
        "participants": '["joost@nordhaven.example", "priya.raman@halyard.example", '
                        '"support@halyard.example"]',
    }
    assert [(b.kind, b.text) for b in document.blocks] == [
        (H, "Priya Raman, 28 Mar 2025 10:00"),
        (P, "Hi Joost,"),
        (P, "The contact spring kit PLV-CS-220-B is fitted on dock D-14."),
    ]  # no sign-off, signature, reply introduction or quoted line


def test_outlook_original_message_block_and_short_sign_off_are_removed():
    document = extract(bytes(_outlook_reply()), "reply.eml")
    assert [(b.kind, b.text) for b in document.blocks] == [
        (H, "Joost van Dijk, 29 Mar 2025 08:30"),
        (P, "Priya, the dock has run all night without E-508."),
    ]


def test_attachments_are_documents_of_their_own_and_others_listed():
    mail = _reply({"parts.csv": b"Part,Price\nPLV-CS-220-B,186\n", "photo.bin": b"\0\1\2"})
    document = extract(bytes(mail), "dock.eml")
    assert [(b.kind, b.text) for b in document.blocks[3:]] == [(P, "Attachment: parts.csv")]
    assert "PLV-CS-220-B; Price" not in " ".join(b.text for b in document.blocks)
    assert document.metadata["attachments"] == "parts.csv"
    assert document.metadata["attachments_skipped"] == \
        "photo.bin (unsupported file type '.bin')"
    [attached] = document.attachments
    assert attached.name == "parts.csv"
    assert attached.content_hash == hashlib.sha256(b"Part,Price\nPLV-CS-220-B,186\n").hexdigest()
    assert attached.document.media_type == "text/csv"
    assert [(b.kind, b.text) for b in attached.document.blocks] == [
        (H, "parts"), (ROW, "Part: PLV-CS-220-B; Price: 186")]
    assert attached.document.metadata == {"attached_to": "Priya Raman, 28 Mar 2025 10:00"}


def test_a_message_forwarded_as_attachment_is_extracted_as_mail_with_its_attachments():
    forward = office_fixtures.mail_message(
        "Oliver Hughes <oliver.hughes@halyard.example>", "Mei Tanaka <mei@halyard.example>",
        "FW: Dock D-14 at Daventry", "Mon, 31 Mar 2025 08:00:00 +0100", "See the attached.\n",
        "<fw-1@halyard.example>")
    forward.add_attachment(_reply({"parts.csv": b"Part,Price\nPLV-CS-220-B,186\n"}))
    document = extract(bytes(forward), "fw.eml")
    assert [(b.kind, b.text, b.level) for b in document.blocks] == [
        (H, "Oliver Hughes, 31 Mar 2025 08:00", 1),
        (P, "See the attached.", 0),
        (P, "Attachment: RE: Dock D-14 at Daventry.eml", 0),
    ]
    assert [a.name for a in document.attachments] == [
        "RE: Dock D-14 at Daventry.eml", "RE: Dock D-14 at Daventry.eml/parts.csv"]
    inner = document.attachments[0].document
    assert inner.media_type == "message/rfc822"
    assert [(b.kind, b.text) for b in inner.blocks] == [
        (H, "Priya Raman, 28 Mar 2025 10:00"),
        (P, "Hi Joost,"),
        (P, "The contact spring kit PLV-CS-220-B is fitted on dock D-14."),
        (P, "Attachment: parts.csv"),
    ]
    assert inner.attachments == ()  # carried by the outer mail, one level of names each


@pytest.mark.parametrize(("names", "expected"), [
    (["../../etc/passwd.txt", "a\\b.txt"], ["passwd.txt", "b.txt"]),
    ([" \x07report.txt ", "report.txt", ".."], ["report.txt", "report (2).txt"]),
    (["notes.txt", "NOTES.txt", "notes.txt"], ["notes.txt", "NOTES (2).txt", "notes (3).txt"]),
])
def test_attachment_names_are_one_safe_unique_path_segment(names, expected):
    mail = _reply()
    for name in names:
        mail.add_attachment(b"Dock D-14 notes.\n", maintype="text", subtype="plain",
                            filename=name)
    document = extract(bytes(mail), "dock.eml")
    assert [a.name for a in document.attachments] == expected
    if ".." in names:  # no name left: named 'attachment', and unsupported without a type
        assert document.metadata["attachments_skipped"] == \
            "attachment (unsupported file type '(none)')"


def test_an_outlook_message_reads_like_its_eml():
    mail = _reply({"parts.csv": b"Part,Price\nPLV-CS-220-B,186\n", "photo.bin": b"\0\1\2"})
    eml = extract(bytes(mail), "dock.eml")
    for transport in (False, True):  # saved from Outlook (properties) or received (headers)
        document = extract(office_fixtures.outlook_msg(mail, transport), "dock.msg")
        assert document.media_type == "application/vnd.ms-outlook"
        assert document.title == eml.title == "Dock D-14 at Daventry"
        assert {k: v for k, v in document.metadata.items() if k != "date"} == {
            k: v for k, v in eml.metadata.items() if k != "date"}
        assert document.metadata["from"] == "Priya Raman <priya.raman@halyard.example>"
        assert document.metadata["cc"] == "support@halyard.example"
        assert document.metadata["message_id"] == "<reply-1@halyard.example>"
        # Outlook keeps the submit time in UTC; the transport headers keep the sender's zone.
        assert document.metadata["date"] == ("2025-03-28T10:00:00+01:00" if transport
                                             else "2025-03-28T09:00:00+00:00")
        assert [b.text for b in document.blocks[1:]] == [b.text for b in eml.blocks[1:]]
        [attached] = document.attachments
        assert (attached.name, attached.document.blocks) == (
            "parts.csv", eml.attachments[0].document.blocks)
        assert "MARKER" not in " ".join(b.text for b in document.blocks)


def test_an_html_only_outlook_message_loses_its_quoted_history():
    message = office_fixtures.mail_message(
        "Priya Raman <priya.raman@halyard.example>", "Joost <joost@nordhaven.example>",
        "Dock status", "Fri, 28 Mar 2025 10:00:00 +0100", "placeholder", "<html-2@h.example>")
    message.set_content(
        "<html><body><p>Dock D-14 is back in service.</p>"
        "<blockquote><p>Is it fixed? QUOTED-MARKER</p></blockquote></body></html>",
        subtype="html")
    document = extract(office_fixtures.outlook_msg(message), "status.msg")
    assert [b.text for b in document.blocks] == [
        "Priya Raman, 28 Mar 2025 09:00", "Dock D-14 is back in service."]


@pytest.mark.parametrize(("data", "reason"), [
    (b"From: someone\n\nnot an OLE file", "not an Outlook message"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600, "not a readable Outlook message"),
])
def test_a_file_that_is_not_an_outlook_message_is_refused_naming_it(data, reason):
    with pytest.raises(ExtractionError, match=rf"^mail/broken.msg: {reason}"):
        extract(data, "mail/broken.msg")


def test_a_truncated_outlook_message_is_refused_naming_it():
    data = office_fixtures.outlook_msg(_reply())
    with pytest.raises(ExtractionError, match=r"^cut.msg: not a readable Outlook message"):
        extract(data[:len(data) // 2], "cut.msg")


def test_mbox_messages_are_sections_of_their_own():
    document = extract(office_fixtures.mbox_bytes([_reply(), _outlook_reply()]), "dock.mbox")
    assert document.media_type == "application/mbox"
    assert document.metadata["messages"] == "2"
    headings = [b.text for b in document.blocks if b.kind is H]
    assert headings == ["Priya Raman, 28 Mar 2025 10:00", "Joost van Dijk, 29 Mar 2025 08:30"]
    text = " ".join(b.text for b in document.blocks)
    assert "MARKER" not in text and "Head of Customer Support" not in text


def test_an_html_only_message_loses_its_quoted_history_and_banner():
    message = office_fixtures.mail_message(
        "Priya Raman <priya.raman@halyard.example>", "Joost <joost@nordhaven.example>",
        "Dock status", "Fri, 28 Mar 2025 10:00:00 +0100", "placeholder", "<html-1@h.example>")
    message.set_content(
        "<html><body><p>Dock D-14 is back in service.</p><p>The kit is fitted.</p>"
        "<blockquote><p>Is it fixed? QUOTED-MARKER</p></blockquote>"
        "<div class='cookie-consent'>Manage cookies BANNER-MARKER</div></body></html>",
        subtype="html")
    document = extract(bytes(message), "status.eml")
    assert [b.text for b in document.blocks] == [
        "Priya Raman, 28 Mar 2025 10:00", "Dock D-14 is back in service.", "The kit is fitted."]


def test_not_a_mailbox_is_refused_naming_the_file():
    with pytest.raises(ExtractionError, match=r"^notes.mbox: not an mbox mailbox"):
        extract(b"Dear all,\nnothing here\n", "notes.mbox")


def test_a_thread_exported_as_text_is_read_as_mail():
    document = extract(CORPUS_THREAD.read_bytes(), "support/thread.txt")
    assert document.metadata["messages"] == "5"
    assert document.metadata["from"] == "Oliver Hughes <oliver.hughes@halyard.example>"
    assert document.metadata["date"] == "2025-03-24T16:45:00+01:00"
    assert document.title == ("SUP-4471 - Fleet stoppage at Rotterdam RTM-1 on 14 March - "
                              "formal complaint")
    headings = [b.text for b in document.blocks if b.kind is H]
    assert headings[:2] == ["Oliver Hughes, 24 Mar 2025 16:45", "Joost van Dijk, 18 Mar 2025 12:22"]
    assert len(headings) == 5
    body = "\n".join(b.text for b in document.blocks if b.kind is not H)
    for boilerplate in ("From:", "Cc:", "Subject:", "Kind regards", "+44 1908 555 0142",
                        "Sales Director, UK & Benelux", "Site Operations Manager",
                        "Head of Customer Support - Halyard", "=====", "-----"):
        assert boilerplate not in body
    assert "EUR 18,400" in body and "Platinum service agreement" in body


def test_plain_text_that_only_mentions_headers_stays_plain():
    text = "Meeting notes\n\nWe discussed the From: field of the form.\n\nDate: to be set.\n"
    document = extract(text.encode(), "notes.txt")
    assert document.media_type == "text/plain" and document.metadata == {}
    assert [b.text for b in document.blocks][1] == "We discussed the From: field of the form."


def test_indexed_mail_leaves_headers_quotes_and_signatures_out_of_every_chunk(
        tmp_path, make_graph):
    folder = write_files(tmp_path / "mail", {
        "dock.eml": bytes(_reply({"parts.csv": b"Part,Price\nPLV-CS-220-B,186\n"})),
        "box.mbox": office_fixtures.mbox_bytes([_outlook_reply()]),
        "saved.msg": office_fixtures.outlook_msg(
            _reply({"parts.csv": b"Part,Price\nPLV-CS-220-B,186\n"})),
        "thread.txt": CORPUS_THREAD.read_bytes(),
    })
    graph = make_graph()
    report = graph.index(folder, namespace="mail")
    assert report.failed == []
    chunks = list(graph.store.chunks_by_rowid(range(1, 1000)).values())
    text = "\n".join(c.text for c in chunks if c.namespace == "mail")
    assert "PLV-CS-220-B" in text and "EUR 18,400" in text
    for boilerplate in ("MARKER", "Kind regards", "From:", "Cc:", "Head of Customer Support",
                        "wrote:", "Original Message"):
        assert boilerplate not in text
    attachment = [c for c in chunks if c.text == "Part: PLV-CS-220-B; Price: 186"]
    assert sorted((c.source_path, c.section_path) for c in attachment) == [
        ("dock.eml/parts.csv", ("parts",)), ("saved.msg/parts.csv", ("parts",))]
    hits = graph.search("price of the contact spring kit", namespaces={"mail"}, k=3)
    assert any(h.source_path == "dock.eml/parts.csv" for h in hits)


def test_community_reports_of_the_sample_support_folder_hold_no_mail_headers_or_signatures(
        tmp_path, make_graph):
    support = CORPUS_THREAD.parent
    graph = make_graph()
    report = graph.index(support, namespace="support")
    assert_sample_build_failures(report.failed, "support/")
    assert any(c.report_doc_id for c in graph.communities({"support"}))
    chunks = graph.store.chunks_by_rowid(range(1, 5000)).values()
    reports = [c.text for c in chunks if c.doc_id.startswith("community://")]
    assert reports
    everything = "\n".join(c.text for c in chunks)
    for boilerplate in ("Cc:", "From: ", "To: Joost", "Sales Director, UK & Benelux",
                        "Field Service Engineer, Halyard Robotics UK", "+44 1908 555 0177",
                        "Kind regards", "Best regards", "wrote:"):
        assert boilerplate not in everything


@pytest.mark.parametrize("form", ["eml", "msg"])
def test_a_blind_copied_recipient_is_a_participant_but_never_shown(form):
    """The sender's copy of a mail keeps its Bcc recipients: they received it, so a folder
    whose mails only their participants may read lets them read it; the other recipients
    were not told of them, so no metadata names them."""
    message = office_fixtures.mail_message(
        "Priya Raman <priya.raman@halyard.example>", "joost@nordhaven.example",
        "Dock D-14", "Fri, 28 Mar 2025 10:00:00 +0100", "The kit is fitted.", "<b-1@h.example>")
    message["Bcc"] = "Auditor <audit@halyard.example>"
    data = bytes(message) if form == "eml" else office_fixtures.outlook_msg(message)
    document = extract(data, f"dock.{form}")
    assert json.loads(document.metadata["participants"]) == [
        "audit@halyard.example", "joost@nordhaven.example", "priya.raman@halyard.example"]
    assert "audit@" not in json.dumps({k: v for k, v in document.metadata.items()
                                       if k != "participants"})
    assert all("audit@" not in b.text for b in document.blocks)
