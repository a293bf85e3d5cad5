"""Log lines as JSON (``[telemetry] log_format = "json"``): one object per line, for a log
pipeline to parse instead of guessing at text.

Every line has ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message`` and, inside a
request, the ``request_id`` its audit record and retrieval traces carry; fields a caller
passed with ``extra=`` (the ``event``, ``status`` ... of the per-request line) follow, and
``exception`` holds a traceback when there is one.
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

from docgraph.telemetry.context import current_request_id

#: The attributes every :class:`logging.LogRecord` has: anything else came from ``extra=``.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime",
                                                          "request_id"}


class RequestIdFilter(logging.Filter):
    """Puts the current request's id on each record (``record.request_id``, None outside a
    request), so a handler's formatter can write it."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the id; never drops a record."""
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or current_request_id()
        if request_id:
            line["request_id"] = request_id
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def use_log_format(handler: logging.Handler, log_format: str) -> None:
    """Give ``handler`` the ``[telemetry] log_format`` (``text`` or ``json``); both carry
    the request id (text: only where a record names it)."""
    handler.addFilter(RequestIdFilter())
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
