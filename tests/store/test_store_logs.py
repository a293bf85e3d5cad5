"""The shared trace log on an embedded index written before traces recorded their caller."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from docgraph.store.sql.logs import SqlTraceLog
from docgraph.store.sqlite import SQLiteCatalog
from docgraph.store.sqlite.logs import create_log_tables


def test_a_traces_table_without_callers_is_upgraded_and_filters_by_caller(
        tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    SQLiteCatalog(path).close()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE traces (id TEXT PRIMARY KEY, created_at REAL NOT NULL,"
               " payload TEXT NOT NULL)")
    db.executemany("INSERT INTO traces VALUES (?, ?, ?)", [
        ("t1", 1.0, json.dumps({"trace_id": "t1", "user_id": "alice"})),
        ("t2", 2.0, json.dumps({"trace_id": "t2", "user_id": "bob"})),
    ])
    db.commit()
    db.close()
    catalog = SQLiteCatalog(path)
    create_log_tables(catalog)
    create_log_tables(catalog)  # idempotent
    log = SqlTraceLog(catalog)
    assert log.get("last", "alice") == {"trace_id": "t1", "user_id": "alice"}
    assert log.get("t2", "alice") is None  # another caller's trace is not handed out
    assert log.get("t2", "bob") == {"trace_id": "t2", "user_id": "bob"}
    log.save("t3", 3.0, {"trace_id": "t3", "user_id": "alice"})
    assert log.get("last", "alice") == {"trace_id": "t3", "user_id": "alice"}
    assert log.get("last")["trace_id"] == "t3"  # type: ignore[index]
    catalog.close()


def test_trace_retention_is_applied_every_tenth_of_the_bound_and_keeps_the_newest(
        tmp_path: Path) -> None:
    catalog = SQLiteCatalog(tmp_path / "index.db")
    create_log_tables(catalog)
    writer = SqlTraceLog(catalog, retention=20)  # drops the oldest every 2 writes
    counts = []
    for i in range(30):
        writer.save(f"t{i:02d}", float(i), {"trace_id": f"t{i:02d}", "user_id": "alice"})
        counts.append(writer.count())
    # never more than a tenth over the bound, and back at the bound after each drop
    assert max(counts) == 21 and counts[-1] == 21 and counts[-2] == 20
    kept = [t["trace_id"] for t in writer.recent(100)]
    assert kept == [f"t{i:02d}" for i in range(29, 8, -1)]  # the newest, newest first
    # a writer that starts later (a restart, another server) drops on its first write
    SqlTraceLog(catalog, retention=5).save("t99", 99.0, {"trace_id": "t99"})
    assert writer.count() == 5
    catalog.close()
