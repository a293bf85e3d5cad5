"""Row-level re-check against a real PostgreSQL server with row-level security policies."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from docgraph.governance import (
    Caller,
    Governance,
    RoleAssignment,
    SqlRowAuthorizer,
    StaticEntitlements,
)
from tests import backend_graphs
from tests.governance_helpers import add_row_documents, create_rls_tickets
from tests.pg import postgres_db, postgres_server  # noqa: F401  (fixtures)

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

ROWS = {
    "1": ("alice", "Ticket 1: Nordhaven fleet stopped with E-417."),
    "2": ("bob", "Ticket 2: Brightwell dock invoice dispute."),
    "3": ("alice", "Ticket 3: Castellan confidential recall escalation."),
    "4": ("bob", "Ticket 4: O'Brien; DROP TABLE tickets; -- asks about Nordhaven."),
}


@pytest.fixture
def crm(postgres_db):  # noqa: F811
    engine = sa.create_engine(postgres_db, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        # One policy for both identity modes: by SQL role, or by a session setting.
        create_rls_tickets(conn, "owner = current_user OR owner = current_setting("
                                 "'docgraph.user_id', true)")
        conn.execute(sa.text("INSERT INTO tickets VALUES (:id, :owner, :body)"),
                     [{"id": int(k), "owner": o, "body": b} for k, (o, b) in ROWS.items()])
        conn.exec_driver_sql("DO $$ BEGIN CREATE ROLE app LOGIN; EXCEPTION WHEN "
                             "duplicate_object THEN NULL; END $$")
        conn.exec_driver_sql("GRANT SELECT ON tickets TO app")
    engine.dispose()
    return postgres_db


def test_set_role_applies_the_databases_row_security(crm):
    authorizer = SqlRowAuthorizer({"crm": crm}, identity="set_role")
    every = ["1", "2", "3", "4"]
    assert authorizer.visible(Caller("alice"), "crm", "public", "tickets", "id", every) == {
        "1", "3"}
    assert authorizer.visible(Caller("bob"), "crm", "public", "tickets", "id", every) == {
        "2", "4"}
    assert authorizer.visible(Caller("carol"), "crm", "public", "tickets", "id", every) == set()


def test_session_setting_identity(crm):
    # The application connects as a non-superuser role ('app'); RLS policies read the
    # caller from current_setting('docgraph.user_id'), set per transaction.
    as_app = crm.replace("postgres@", "app@", 1)
    authorizer = SqlRowAuthorizer({"crm": as_app}, identity="session_setting")
    every = ["1", "2", "3", "4"]
    assert authorizer.visible(Caller("bob"), "crm", "public", "tickets", "id", every) == {
        "2", "4"}
    assert authorizer.visible(Caller("alice"), "crm", "public", "tickets", "id", every) == {
        "1", "3"}
    # Without an identity switch the app role sees nothing (it owns no row).
    plain = SqlRowAuthorizer({"crm": as_app}, identity="none")
    assert plain.visible(Caller("bob"), "crm", "public", "tickets", "id", every) == set()


def test_hostile_values_and_names_stay_data(crm):
    authorizer = SqlRowAuthorizer({"crm": crm}, identity="set_role")
    hostile = ["1'; DROP TABLE tickets; --", "2 OR 1=1", "4"]
    assert authorizer.visible(Caller("bob"), "crm", "public", "tickets", "id", hostile) == {"4"}
    with pytest.raises(Exception):  # noqa: B017 - a role name that is not an identifier
        authorizer.visible(Caller("bob; RESET ROLE"), "crm", "public", "tickets", "id", ["2"])
    with pytest.raises(sa.exc.ProgrammingError):
        authorizer.visible(Caller("bob"), "crm", "public", 'tickets" ; DROP TABLE x; --', "id",
                           ["2"])
    engine = sa.create_engine(crm, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM tickets").scalar() == 4
    engine.dispose()


def test_callers_see_different_rows_of_the_same_table_end_to_end(crm, make_graph):
    graph = make_graph()
    add_row_documents(graph, "support", "tickets", {k: b for k, (_, b) in ROWS.items()},
                      source="crm", column="body")
    governance = Governance(
        graph,
        StaticEntitlements([RoleAssignment("alice", "agent", "support"),
                            RoleAssignment("bob", "agent", "support"),
                            RoleAssignment("carol", "agent", "support")]),
        SqlRowAuthorizer({"crm": crm}, identity="set_role"),
    )
    seen = {}
    for user in ("alice", "bob", "carol"):
        hits = governance.search(Caller(user), "Ticket Nordhaven", k=10)
        seen[user] = {h.doc_id.rsplit("/", 1)[1] for h in hits}
    assert seen == {"alice": {"1", "3"}, "bob": {"2", "4"}, "carol": set()}
    # The database going away fails closed: nothing from the table is shown.
    broken = SqlRowAuthorizer({"crm": crm.replace("127.0.0.1", "127.0.0.1:1")})
    governance.row_authorizer = broken
    assert governance.search(Caller("alice"), "Ticket Nordhaven", k=10) == []
    assert governance.audit.recent(1)[0]["authorizer_failures"]


def test_a_recheck_of_more_rows_than_a_statement_can_bind_still_answers(crm):
    # A report over a large community re-checks every row it was built from: far more
    # primary keys than PostgreSQL binds in one statement (65,535).
    engine = sa.create_engine(crm, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO tickets SELECT g, CASE WHEN mod(g, 2) = 0 THEN 'bob' "
                             "ELSE 'alice' END, 'row' FROM generate_series(10, 80009) g")
    engine.dispose()
    authorizer = SqlRowAuthorizer({"crm": crm}, identity="set_role")
    wanted = [str(i) for i in range(10, 80010)]
    seen = authorizer.visible(Caller("bob"), "crm", "public", "tickets", "id", wanted)
    assert len(seen) == 40_000 and "80008" in seen and "80009" not in seen
