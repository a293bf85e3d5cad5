"""Every limit a caller meets, and the search modes, in one place (ground floor: imports
nothing of docgraph).

Two kinds of bound live here, and where they share a subject they have distinct names:

- **The governed limits** bound what any caller of :class:`~docgraph.governance.Governance`
  may send: agents over MCP and the JSON API, the CLI and the Python API alike. They are
  checked once, at the governed entry (``governance/inputs.py``); the MCP tools and the
  JSON API declare the same numbers in the JSON schema agents read (``serve/tool_args.py``,
  ``serve/agent_tools.py``), where a few are narrower for agents (``AGENT_*``).
- **The engine caps** (``ENGINE_*``) bound one call of the search engines themselves
  (``retrieve/``): they are wider than the governed limits, because the governed search
  over-fetches (it asks the engine for more than ``k`` and widens while its row filter drops
  hits) and because the owner's ungoverned API (``DocGraph.search``, ``retrieve``,
  ``context``) is for trusted code. A governed caller never reaches an engine cap.

Wire-format bounds that belong to one parser stay with it: JSON nesting depth
(``serve/json_checks.py``), the length of a bearer token (``serve/auth.py``), the size of a
console form (``serve/console/routes.py``). Limits on what is *indexed* (file sizes, OCR
pages, unpacked archives) are settings (``config/``) checked by ``ingest/limits.py``.
"""

from __future__ import annotations

from typing import Literal, get_args

# -- search modes ---------------------------------------------------------------------------

#: The cohort engine's modes (``retrieve/cohort.py``): lanes, composite ranking, a trace.
#: These are the modes agents may pick (``search_documents``'s ``mode``).
CohortMode = Literal["vector_first", "graph_first", "global"]
#: The hybrid searcher's modes (``retrieve/hybrid.py``): single chunks ranked by fused
#: dense + BM25 lists (``hybrid``) or by the dense list alone (``dense``).
HybridMode = Literal["hybrid", "dense"]
#: Every mode a governed search accepts: the cohort modes and the hybrid modes.
SearchMode = Literal[CohortMode, HybridMode]

COHORT_MODES: tuple[CohortMode, ...] = get_args(CohortMode)
HYBRID_MODES: tuple[HybridMode, ...] = get_args(HybridMode)
SEARCH_MODES: tuple[SearchMode, ...] = get_args(SearchMode)

# -- governed limits: text ------------------------------------------------------------------

#: The longest query text a governed search takes (characters). One atomic question or a
#: search phrase is far shorter; 2,000 still holds a pasted paragraph, and bounds what the
#: tokenizer, the BM25 query and the trace and audit rows are handed.
MAX_QUERY_CHARS = 2000
#: The longest entity name, name filter or entity type (characters): names are short; 200
#: bounds the ``LIKE`` patterns and key lookups built from them.
MAX_NAME_CHARS = 200
#: The longest document or chunk id (characters): an agent-visible id is
#: ``<source>/<path>#chunk-N`` and a stored one a ``file:///`` URN, so it must hold a long
#: path (file systems allow 4,096 bytes, real paths stay far below 2,000).
MAX_ID_CHARS = 2000
#: The longest opaque cursor (``list_documents``, ``read_document``): the cursors docgraph
#: hands out are a few dozen characters; anything longer was not handed out.
MAX_CURSOR_CHARS = 200

# -- governed limits: counts and budgets ----------------------------------------------------

#: The most results one governed search returns (``k``): enough to widen a thin answer,
#: few enough that a page of results fits an agent's context and the row re-check of the
#: over-fetch stays cheap.
MAX_RESULTS = 50
#: The most entries one page of a listing holds (documents, entities, communities).
MAX_PAGE = 200
#: A read's token budget per page (``read_document``, ``fetch``, ``Governance.read``): at
#: least a chunk's worth, at most what one tool answer should put into an agent's context.
MIN_READ_BUDGET = 200
MAX_READ_BUDGET = 16_000
#: Context assembly's token budget (``Governance.context``, the CLI's ``context``,
#: ``DocGraph.context`` and the engine): below 100 the smallest section's share (10 %) is
#: under 10 tokens and holds no row; 32,000 is a large model's whole prompt.
MIN_CONTEXT_BUDGET = 100
MAX_CONTEXT_BUDGET = 32_000
#: The ``document_context`` tool's token budget, narrower than context assembly's: an
#: agent's briefing shares the model's window with the conversation, so at most 16,000 (the
#: same ceiling as a read), and at least 200 (fewer leaves the sections nearly empty).
AGENT_MIN_CONTEXT_BUDGET = 200
AGENT_MAX_CONTEXT_BUDGET = 16_000

# -- transport ------------------------------------------------------------------------------

#: The largest JSON API request body (bytes): every valid set of arguments fits with room
#: to spare (the longest, a 2,000-character query or id, is at most 24,000 bytes even with
#: every character escaped, an astral one as two ``\\uXXXX``).
MAX_BODY_BYTES = 64 * 1024

# -- engine caps ----------------------------------------------------------------------------

#: The most hits one engine call returns (hybrid or cohort search). The governed search
#: asks for ``k`` times its over-fetch and doubles while its row filter drops hits, up to
#: this cap, so it must stay well above :data:`MAX_RESULTS`; the owner's ungoverned
#: ``DocGraph.search`` is bounded by it too.
ENGINE_MAX_K = 1000
#: The longest query text an engine call takes (characters): twice :data:`MAX_QUERY_CHARS`,
#: so no governed query is refused by the engine, and still a bound for the owner's
#: ungoverned API.
ENGINE_MAX_QUERY_CHARS = 4000
