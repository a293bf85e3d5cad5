"""E-mail: ``.eml`` (one RFC 5322 message), ``.mbox`` (a mailbox of them) and threads
exported as plain text, through the standard library's :mod:`email` and :mod:`mailbox`;
Outlook ``.msg`` files through python-oxmsg (MIT, over olefile).

A mail document has one section per message, headed by the sender and date (plus the
subject where it differs from the thread's): headers are the document's metadata (from,
to, cc, date, subject, message id), never body text. Bodies lose quoted replies and
signatures (:mod:`docgraph.ingest.boilerplate`), so a thread's earlier messages are their
own sections instead of being repeated in every reply. Supported attachments are
extracted with the extractor of their type as documents of their own
(:attr:`ExtractedDocument.attachments`, indexed as ``<mail>/<attachment>``); their message
says ``Attachment: <name>``. Others are listed in the metadata as skipped.
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import hashlib
import json
import mailbox
import os
import re
import tempfile
from dataclasses import dataclass, field
from email.message import EmailMessage

from docgraph.errors import ExtractionError, FileTooLarge
from docgraph.ingest.blocks import clean, paragraph_blocks, title_from_name
from docgraph.ingest.boilerplate import clean_mail_body, split_mail_thread
from docgraph.ingest.decode import decode_text
from docgraph.ingest.limits import ExtractLimits
from docgraph.model import AttachedDocument, Block, BlockKind, ExtractedDocument

EML_MEDIA_TYPE = "message/rfc822"
MBOX_MEDIA_TYPE = "application/mbox"
MSG_MEDIA_TYPE = "application/vnd.ms-outlook"
# MS-OXPROPS: PidTagRecipientType (1 To, 2 Cc, 3 Bcc), PidTagInternetMessageId.
_PID_RECIPIENT_TYPE = 0x0C15
_PID_INTERNET_MESSAGE_ID = 0x1035

#: The metadata key listing a mail's participants' addresses (a JSON array, see
#: :func:`participants`).
PARTICIPANTS_KEY = "participants"
#: Headers kept as document metadata, by their metadata key.
MAIL_HEADERS = {"from": "from", "to": "to", "cc": "cc", "date": "date", "subject": "subject",
                "message-id": "message_id"}
_REPLY_PREFIX = re.compile(r"^\s*((re|fw|fwd|aw|wg|sv|antw|tr)\s*(\[\d+\])?\s*:\s*)+",
                           re.IGNORECASE)


@dataclass
class MailMessage:
    """One message: headers by metadata key, plain-text body (not yet cleaned),
    attachments as (file name, bytes) and those that could not be read, with why."""

    headers: dict[str, str]
    body: str
    attachments: list[tuple[str, bytes]] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # attachments not read, with why
    #: Blind-copied recipients (the sender's copy keeps them): participants, never
    #: metadata, since the other recipients were not told of them.
    bcc: str = ""

    @property
    def sender(self) -> str:
        """The sender's display name, else address."""
        name, address = email.utils.parseaddr(self.headers.get("from", ""))
        return clean(name or address)


def participants(messages: list[MailMessage]) -> list[str]:
    """Every address the messages were from, to, copied or blind-copied to (lower case,
    sorted): who may read a mail when its source makes each mail readable by its
    participants only."""
    found: set[str] = set()
    for message in messages:
        for value in (*(message.headers.get(k, "") for k in ("from", "to", "cc")),
                      message.bcc):
            for _, address in email.utils.getaddresses([value]):
                if "@" in address:
                    found.add(address.strip().lower())
    return sorted(found)


def thread_subject(subject: str) -> str:
    """A subject without its reply/forward prefixes ("RE: FW: x" -> "x")."""
    return clean(_REPLY_PREFIX.sub("", subject))


def _iso_date(value: str) -> str:
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return clean(value)
    return parsed.isoformat() if parsed is not None else clean(value)


def _heading_date(value: str) -> str:
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return clean(value)
    return parsed.strftime("%d %b %Y %H:%M").lstrip("0") if parsed is not None else ""


def _from_email(message: EmailMessage) -> MailMessage:
    headers = {key: clean(str(message[header])) for header, key in MAIL_HEADERS.items()
               if message[header] is not None}
    body = ""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is not None:
        content = part.get_content()
        if isinstance(content, bytes):
            content = decode_text(content, "body")
        body = _html_text(content) if part.get_content_subtype() == "html" else content
    attachments: list[tuple[str, bytes]] = []
    if message.is_multipart():
        for attachment in message.iter_attachments():
            filename = attachment.get_filename()
            payload: object = attachment.get_payload(decode=True)
            if attachment.get_content_type() == "message/rfc822":
                # A message forwarded as an attachment: extracted as an .eml of its own.
                inner = attachment.get_content()
                if isinstance(inner, EmailMessage):
                    payload = bytes(inner)
                    subject = clean(str(inner["subject"] or "")).replace("/", "-")
                    filename = filename or f"{subject or 'message'}.eml"
                    if not filename.lower().endswith(".eml"):
                        filename += ".eml"
            if filename and isinstance(payload, bytes):
                attachments.append((filename, payload))
    bcc = clean(str(message["bcc"])) if message["bcc"] is not None else ""
    return MailMessage(headers, body, attachments, bcc=bcc)


def _html_text(html: str) -> str:
    from bs4 import BeautifulSoup

    from docgraph.ingest.boilerplate import strip_html_boilerplate

    soup = BeautifulSoup(html, "lxml")
    strip_html_boilerplate(soup)
    for br in soup.find_all("br"):
        br.replace_with("\n")
    for block in soup.find_all(["p", "div", "li", "tr", "h1", "h2", "h3", "h4", "blockquote"]):
        block.insert_before("\n\n")
    for quote in soup.find_all("blockquote"):  # quoted history in HTML mail
        quote.decompose()
    return str(soup.get_text())


def extract_eml(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """One RFC 5322 message (``.eml``)."""
    parsed = email.message_from_bytes(data, policy=email.policy.default)
    if not isinstance(parsed, EmailMessage) or not parsed.keys():
        raise ExtractionError(f"{name}: not an e-mail message (no headers)")
    return mail_document([_from_email(parsed)], name, limits, EML_MEDIA_TYPE)


def extract_msg(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """An Outlook message (``.msg``, MS-OXMSG) read with python-oxmsg: the transport
    headers where the message kept them (a received mail), else its sender, recipient,
    submit time (UTC, as Outlook stores it), subject and message id properties; the
    plain-text body, else the HTML one; attachments by value (an embedded Outlook message is
    listed as not read)."""
    from oxmsg import Message

    if not data.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        raise ExtractionError(f"{name}: not an Outlook message (no OLE compound file header)")
    try:
        message = Message.load(data)
        transport = {k.lower(): v for k, v in message.message_headers.items()}
        headers = {key: clean(str(transport[header])) for header, key in MAIL_HEADERS.items()
                   if transport.get(header)}
        if "from" not in headers and message.sender:
            display, address = email.utils.parseaddr(message.sender)
            headers["from"] = clean(email.utils.formataddr((display, address)) if address
                                    else message.sender)
        for kind, key in ((1, "to"), (2, "cc")):
            if key not in headers:
                found = [email.utils.formataddr((r.name, r.email_address))
                         if r.name and r.name != r.email_address else r.email_address
                         for r in message.recipients
                         if r.properties.int_prop_value(_PID_RECIPIENT_TYPE) == kind]
                if found:
                    headers[key] = clean(", ".join(found))
        if "date" not in headers and message.sent_date is not None:
            headers["date"] = email.utils.format_datetime(message.sent_date)
        if "subject" not in headers and message.subject:
            headers["subject"] = clean(message.subject)
        message_id = message.properties.str_prop_value(_PID_INTERNET_MESSAGE_ID)
        if "message_id" not in headers and message_id:
            headers["message_id"] = clean(message_id)
        body = message.body or ""
        if not body.strip() and message.html_body:
            body = _html_text(message.html_body)
        blind = [r.email_address for r in message.recipients
                 if r.properties.int_prop_value(_PID_RECIPIENT_TYPE) == 3 and r.email_address]
        read = MailMessage(headers, body, bcc=clean(str(transport.get("bcc") or ""))
                           or ", ".join(blind))
        for attachment in message.attachments:
            filename = attachment.file_name or ""
            payload = attachment.file_bytes
            if filename and payload is not None and attachment.attached_by_value:
                read.attachments.append((filename, payload))
            else:
                read.unread.append(f"{attachment_name(filename)} (an embedded Outlook message "
                                   "or a link, not read)")
    except ExtractionError:
        raise
    except Exception as exc:  # a damaged compound file or property stream
        raise ExtractionError(
            f"{name}: not a readable Outlook message ({type(exc).__name__}: {exc})") from exc
    return mail_document([read], name, limits, MSG_MEDIA_TYPE)


def extract_mbox(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """A Unix mailbox (``.mbox``): every message its own section, in mailbox order."""
    if not data.startswith(b"From "):
        raise ExtractionError(f"{name}: not an mbox mailbox (it must start with 'From ')")
    handle, path = tempfile.mkstemp(suffix=".mbox")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        box = mailbox.mbox(path, factory=None, create=False)
        try:
            messages = []
            for key in box.iterkeys():
                raw = box.get_bytes(key)
                parsed = email.message_from_bytes(raw, policy=email.policy.default)
                if isinstance(parsed, EmailMessage):
                    messages.append(_from_email(parsed))
        finally:
            box.close()
    finally:
        os.unlink(path)
    if not messages:
        raise ExtractionError(f"{name}: mailbox holds no messages")
    return mail_document(messages, name, limits, MBOX_MEDIA_TYPE)


def mail_thread_text(text: str, name: str, limits: ExtractLimits) -> ExtractedDocument | None:
    """A plain text that is a mail thread (header blocks of ``From:``/``Date:``/``To:``/
    ``Subject:`` lines) as a mail document; None when it is not one."""
    split = split_mail_thread(text)
    if split is None:
        return None
    preamble, found = split
    messages = [MailMessage({MAIL_HEADERS[k]: v for k, v in m.headers.items()
                             if k in MAIL_HEADERS}, m.body) for m in found]
    document = mail_document(messages, name, limits, "text/plain")
    intro = tuple(paragraph_blocks(preamble))
    if not intro:
        return document
    return ExtractedDocument(document.title, intro + document.blocks, document.media_type,
                             document.metadata)


def mail_document(messages: list[MailMessage], name: str, limits: ExtractLimits,
                  media_type: str) -> ExtractedDocument:
    """Messages as one document: a section per message with its cleaned body and a line
    per attachment; metadata from the first message (and the message count). Supported
    attachments become :class:`AttachedDocument` s of their own (an attached message's own
    attachments too, named ``<message>.eml/<name>``); their text counts towards the
    mail's text limit."""
    first = messages[0]
    title = thread_subject(first.headers.get("subject", "")) or title_from_name(name)
    metadata = dict(first.headers)
    if "date" in metadata:
        metadata["date"] = _iso_date(metadata["date"])
    if len(messages) > 1:
        metadata["messages"] = str(len(messages))
    found = participants(messages)
    if found:
        metadata[PARTICIPANTS_KEY] = json.dumps(found)
    blocks: list[Block] = []
    attached: list[AttachedDocument] = []
    taken: set[str] = set()
    skipped: list[str] = []
    chars = 0
    for message in messages:
        heading = ", ".join(p for p in (message.sender,
                                        _heading_date(message.headers.get("date", ""))) if p)
        subject = thread_subject(message.headers.get("subject", ""))
        if subject and subject.casefold() != title.casefold():
            heading = f"{heading}: {subject}" if heading else subject
        blocks.append(Block(BlockKind.HEADING, heading or "Message", 1))
        body = paragraph_blocks(clean_mail_body(message.body, message.sender))
        blocks.extend(body)
        chars += sum(len(b.text) for b in body)
        limits.check_text(name, chars)
        skipped.extend(message.unread)
        for raw_name, payload in message.attachments:
            filename = _unique_name(attachment_name(raw_name), taken)
            inner = _attachment(payload, f"{name}/{filename}", limits)
            if isinstance(inner, str):
                skipped.append(f"{filename} ({inner})")
                continue
            taken.add(filename.casefold())
            blocks.append(Block(BlockKind.PARAGRAPH, f"Attachment: {filename}"))
            inner_metadata = {**inner.metadata, "attached_to": heading or title}
            attached.append(AttachedDocument(
                filename, hashlib.sha256(payload).hexdigest(),
                ExtractedDocument(inner.title, inner.blocks, inner.media_type, inner_metadata)))
            attached.extend(AttachedDocument(f"{filename}/{a.name}", a.content_hash, a.document)
                            for a in inner.attachments)
            chars += sum(len(b.text) for a in (inner, *(a.document for a in inner.attachments))
                         for b in a.blocks)
            limits.check_text(name, chars)
    if attached:
        metadata["attachments"] = ", ".join(a.name for a in attached)
    if skipped:
        metadata["attachments_skipped"] = "; ".join(skipped)
    return ExtractedDocument(title, tuple(blocks), media_type, metadata, tuple(attached))


def attachment_name(raw: str) -> str:
    """An attachment's file name as one safe path segment: its last component, control
    characters and surrounding spaces removed; ``attachment`` when nothing (or only ``.``
    or ``..``) is left."""
    base = raw.replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(c for c in base if c.isprintable()).strip()
    return base if base not in ("", ".", "..") else "attachment"


def _unique_name(filename: str, taken: set[str]) -> str:
    """``filename``, or ``stem (2).ext``, ``stem (3).ext``... when a mail already has an
    attachment of that name (compared without case: one path must name one document)."""
    if filename.casefold() not in taken:
        return filename
    stem, dot, ext = filename.rpartition(".")
    if not dot or not stem:
        stem, ext = filename, ""
    n = 2
    while True:
        candidate = f"{stem} ({n}).{ext}" if ext else f"{stem} ({n})"
        if candidate.casefold() not in taken:
            return candidate
        n += 1


def _attachment(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument | str:
    """An attachment extracted by its type, or why it was not (a too large attachment
    makes the whole mail too large)."""
    from docgraph.ingest.extract import extract

    try:
        return extract(data, name, limits)
    except FileTooLarge:
        raise
    except ExtractionError as exc:
        reason = str(exc)
        return reason[len(name) + 2:] if reason.startswith(f"{name}: ") else reason
