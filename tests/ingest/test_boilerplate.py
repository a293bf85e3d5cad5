"""Boilerplate removal shared by the formats: quoted replies, signatures, navigation and
cookie banners never become blocks."""

from __future__ import annotations

from docgraph.ingest.boilerplate import (
    clean_mail_body,
    split_mail_thread,
    strip_quoted,
    strip_signature,
)
from docgraph.ingest.extract import extract


def test_quoted_lines_and_reply_introductions_end_the_body():
    body = ("Yes, Tuesday works.\n> earlier text\nmore of mine\n\n"
            "On Mon, 3 Mar 2025, Jane Doe\n<jane@example.com> wrote:\n> the history\n")
    assert strip_quoted(body) == "Yes, Tuesday works.\nmore of mine\n"


def test_outlook_header_block_ends_the_body():
    body = "Done.\n\nFrom: Jane Doe\nSent: Monday, 3 March 2025 10:00\nTo: Bob\nold text\n"
    assert strip_quoted(body).strip() == "Done."


def test_signature_after_the_delimiter_or_a_sign_off_is_removed():
    assert strip_signature("Text.\n-- \nJane Doe\nACME") == "Text."
    assert strip_signature("Text.\n\nBest regards,\nJane Doe\nCEO, ACME") == "Text."
    # A sign-off followed by long lines is prose, not a signature.
    long_line = "x" * 120
    assert strip_signature(f"Thanks\n{long_line}") == f"Thanks\n{long_line}"


def test_a_closing_name_paragraph_of_the_sender_is_a_signature():
    assert strip_signature("Please call me.\n\nPriya Raman\nHead of Support",
                           "Priya Raman") == "Please call me."
    # Not the sender: kept.
    assert strip_signature("Please call me.\n\nOliver will join.", "Priya Raman") == \
        "Please call me.\n\nOliver will join."


def test_clean_mail_body_removes_quote_then_signature():
    body = "See below.\n\nCheers,\nBob\n\nOn Tue, Bob wrote:\n> old\n"
    assert clean_mail_body(body, "Bob") == "See below."


def test_thread_split_needs_a_header_block_near_the_start():
    assert split_mail_thread("A report.\n\nFrom: the field team we heard ...\n") is None
    preamble, messages = split_mail_thread(
        "Export note\n=====\nFrom: A <a@x>\nTo: B <b@x>\nDate: Mon, 3 Mar 2025 10:00 +0000\n"
        "Subject: Hi\n\nBody one.\n----------\nFrom: B <b@x>\nTo: A <a@x>\n"
        "Date: Sun, 2 Mar 2025 09:00 +0000\nSubject: Hi\n\nBody two.\n") or ("", [])
    assert preamble == "Export note"
    assert [(m.headers["from"], m.body) for m in messages] == [
        ("A <a@x>", "Body one."), ("B <b@x>", "Body two.")]


HTML_PAGE = """<html><head><title>SLA</title></head><body>
<div id="cookie-banner"><p>We use cookies to improve your experience. Accept all?</p></div>
<div class="cc-window consent-dialog"><p>Manage consent preferences</p></div>
<header role="banner"><a href="/">Home</a> <a href="/support">Support</a></header>
<nav><a href="/">Home</a></nav>
<div role="navigation"><a href="/a">Section A</a></div>
<main><h1>Support SLA</h1><p>Platinum P1 response within 15 minutes.</p></main>
<footer><p>Copyright 2025 Halyard Robotics. All rights reserved.</p></footer>
</body></html>"""


def test_html_navigation_footers_and_consent_banners_are_not_text():
    document = extract(HTML_PAGE.encode(), "sla.html")
    assert [b.text for b in document.blocks] == [
        "Support SLA", "Platinum P1 response within 15 minutes."]
