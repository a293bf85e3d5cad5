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
