"""What each console page shows, gathered through the governed service and the console's
narrow ports (never SQL): plain dicts and lists for the templates. Every function blocks
(the store may be a PostgreSQL round trip); the routes run them in worker threads.

The pages live in one module each; this module names them for the routes:

- :mod:`~docgraph.serve.console.ports` - :class:`ConsoleIndex` (what the console uses of
  the index), the governed service as the console is handed it, :func:`page_reader`;
- :mod:`~docgraph.serve.console.changes` - the audit of changes (``console:<action>``
  records of the signed-in admin) and one-at-a-time background jobs;
- :mod:`~docgraph.serve.console.status` - Status and the console's "refresh now";
- :mod:`~docgraph.serve.console.sources` - Sources and Tags;
- :mod:`~docgraph.serve.console.settings` - Settings, the chat model, the embedding model;
- :mod:`~docgraph.serve.console.traces` - Traces and the lane-share chart;
- :mod:`~docgraph.serve.console.explore` - the graph, a community, a document, the
  playground.

The governed reads that only render a page go through :func:`page_reader` and write no
audit records.
"""

from __future__ import annotations

from docgraph.serve.console.changes import BackgroundJob, audit_change, change_audited
from docgraph.serve.console.explore import (
    EXCERPT_CHARS,
    GRAPH_LIMIT,
    PLAYGROUND_MODES,
    PLAYGROUND_TOOLS,
    community_page,
    document_page,
    graph_page,
    run_playground,
)
from docgraph.serve.console.ports import ConsoleGovernance, ConsoleIndex, page_reader
from docgraph.serve.console.settings import (
    BACKEND_SETTINGS,
    READ_ONLY_SETTINGS,
    ModelChange,
    change_chat_model,
    change_settings,
    chat_model_view,
    setting_problems,
    settings_page,
)
from docgraph.serve.console.sources import (
    REACH_TIMEOUT_SECONDS,
    FolderPreview,
    add_folder,
    add_sql_source,
    preview_folder,
    reach_folder,
    remove_folder,
    remove_sql_source,
    remove_tag,
    set_tag,
    sources_page,
    tags_page,
    update_folder,
)
from docgraph.serve.console.status import RefreshJob, status_page
from docgraph.serve.console.traces import (
    LANE_COLOURS,
    LANE_LABELS,
    LANE_ORDER,
    RECENT_LIMIT,
    lane_label,
    lane_share_chart,
    provenance_shares,
    trace_page,
    traces_page,
)

__all__ = [
    "BACKEND_SETTINGS",
    "EXCERPT_CHARS",
    "GRAPH_LIMIT",
    "LANE_COLOURS",
    "LANE_LABELS",
    "LANE_ORDER",
    "PLAYGROUND_MODES",
    "PLAYGROUND_TOOLS",
    "REACH_TIMEOUT_SECONDS",
    "READ_ONLY_SETTINGS",
    "RECENT_LIMIT",
    "BackgroundJob",
    "ConsoleGovernance",
    "ConsoleIndex",
    "FolderPreview",
    "ModelChange",
    "RefreshJob",
    "add_folder",
    "add_sql_source",
    "audit_change",
    "change_audited",
    "change_chat_model",
    "change_settings",
    "chat_model_view",
    "community_page",
    "document_page",
    "graph_page",
    "lane_label",
    "lane_share_chart",
    "page_reader",
    "preview_folder",
    "provenance_shares",
    "reach_folder",
    "remove_folder",
    "remove_sql_source",
    "remove_tag",
    "run_playground",
    "set_tag",
    "setting_problems",
    "settings_page",
    "sources_page",
    "status_page",
    "tags_page",
    "trace_page",
    "traces_page",
    "update_folder",
]
