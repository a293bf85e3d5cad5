"""A caller who may read a small part of a namespace gets its ``k`` hits from that part: the
index lanes rank only the documents its principals may read (filtered before ranking), on
the embedded file and on PostgreSQL.

The corpus: many documents only ``group:finance`` may read, all matching the query better
than the few that bob (not in finance) may read. Filtering after ranking (with the governed
over-fetch and its refill rounds) gives bob almost nothing; filtering before ranking gives
him exactly his documents, in every mode.
"""

from __future__ import annotations

import numpy as np

from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.store.restricted import RestrictedRows
from tests import backend_graphs
from tests.helpers import write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

SIDECAR = ".docgraph-access.yaml"
QUERY = "Tern T3 release manifest dock cargo pallet"
#: More restricted documents than the governed refill reaches (k * 2, doubled 4 times).
RESTRICTED = 72
BOBS = 4


def _corpus(root):  # type: ignore[no-untyped-def]
    files = {f"vault/r{i:03d}.md": f"# Dock {i}\n\n{QUERY} {i}.\n" for i in range(RESTRICTED)}
    files |= {f"vault/bob{j}.md": f"# Note {j}\n\nTern notes kept for bob, number {j}.\n"
              for j in range(BOBS)}
    rules = "".join(f"  bob{j}.md: [user:bob]\n" for j in range(BOBS))
    files[f"vault/{SIDECAR}"] = f"access: [group:finance]\nfiles:\n{rules}"
    return write_files(root, files)


def _governance(graph):  # type: ignore[no-untyped-def]
    grants = [RoleAssignment(u, "agent", "ops") for u in ("alice", "bob")]
    return Governance(graph, StaticEntitlements(grants, members={"finance": ["alice"]}))


def test_a_caller_who_may_read_little_gets_k_hits_from_it(tmp_path, make_graph):
    graph = make_graph()
    graph.index(_corpus(tmp_path / "c"), namespace="ops")
    governance = _governance(graph)
    for mode in ("hybrid", "dense", "vector_first"):
        hits = governance.search(Caller("bob"), QUERY, k=BOBS, mode=mode)
        assert sorted(h.doc_id.rsplit("/", 1)[-1] for h in hits) == [
            f"bob{j}.md" for j in range(BOBS)], mode
        # alice (finance) reads the restricted documents, which rank first for her
        alice = governance.search(Caller("alice"), QUERY, k=BOBS, mode=mode)
        assert len(alice) == BOBS and all("/r" in h.doc_id for h in alice), mode


def test_a_permission_change_made_by_another_process_moves_the_filter(tmp_path, make_graph):
    folder = _corpus(tmp_path / "c")
    serving = make_graph()  # a server's long-lived index...
    serving.index(folder, namespace="ops")
    governance = _governance(serving)

    def bob_reads() -> set[str]:
        return {h.doc_id.rsplit("/", 1)[-1]
                for h in governance.search(Caller("bob"), QUERY, k=8, mode="hybrid")}

    assert bob_reads() == {f"bob{j}.md" for j in range(BOBS)}
    # ...and a build elsewhere opens r000-r003 to bob without re-embedding them
    opened = "".join(f"  r{i:03d}.md: [user:bob]\n" for i in range(4))
    (folder / "vault" / SIDECAR).write_text(
        (folder / "vault" / SIDECAR).read_text() + opened)
    builder = make_graph()
    report = builder.index(folder, namespace="ops")
    assert report.access_changed == 4 and report.passages_embedded == 0
    assert bob_reads() == {f"bob{j}.md" for j in range(BOBS)} | {
        f"r{i:03d}.md" for i in range(4)}


def test_the_row_filter_keeps_the_rows_a_callers_principals_may_read():
    rows = RestrictedRows([(frozenset({"group:finance"}), 7), (frozenset({"user:bob"}), 3),
                           (frozenset({"group:finance", "user:bob"}), 11)])
    snapshot = np.array([1, 3, 5, 7, 9, 11, 13], dtype=np.int64)
    keep = rows.row_filter(frozenset({"user:bob"}))
    assert keep is not None
    assert keep(snapshot, 7).tolist() == [True, True, True, False, True, True, True]
    assert keep(snapshot, 7) is keep(snapshot, 7)  # one mask per snapshot for a query's lanes
    assert keep(snapshot, 6).tolist() == [True, True, True, False, True, True]
    finance = rows.row_filter(frozenset({"group:finance", "user:carol"}))
    assert finance is not None
    assert finance(snapshot, 5).tolist() == [True, False, True, True, True]
    # nobody named: only the unrestricted rows; everyone named: no filter at all
    nobody = rows.row_filter(frozenset())
    assert nobody is not None
    assert nobody(snapshot, 7).tolist() == [True, False, True, False, True, False, True]
    assert rows.row_filter(frozenset({"group:finance", "user:bob"})) is None
    assert RestrictedRows([]).row_filter(frozenset()) is None
