"""The web console of ``docgraph serve`` under ``/console``, for the people who run docgraph:
Status, Sources, Traces and audit, and a Playground (see :mod:`.routes` for the pages and
:mod:`.sessions` for sign-in)."""

from docgraph.serve.console.routes import PREFIX, Console, console_routes
from docgraph.serve.console.sessions import ConsoleAuth, SessionStore, is_console_admin

__all__ = ["PREFIX", "Console", "ConsoleAuth", "SessionStore", "console_routes",
           "is_console_admin"]
