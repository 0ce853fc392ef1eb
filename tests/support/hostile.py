"""An archive as an attacker would hand it over: markup, script and terminal escapes in
every text column, in the JSON ones (a constant group, a run's metrics, the stored
configuration, an LLM reply and error) and in a program's source under its own hash
(so it is no edited source: the report must show it, escaped)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from evolve.archive.ids import source_id

MARKUP = ('"><img src=x onerror="document.title=\'pwned\'"><script>document.title='
          '"pwned"</script><a href="javascript:document.title=\'pwned\'">x</a>')
CONTROL = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202e"
HOSTILE = MARKUP + CONTROL + "/../../../evil"
IDS = {("programs", "id"), ("evaluations", "program_id"), ("grid_cells", "program_id"),
       ("frontier", "program_id"), ("corpus_versions", "program_id"),
       ("final_scores", "program_id")}
KEEP = {("programs", "source"), ("runs", "config"), ("runs", "splits"),
        ("programs", "parent_ids"), ("evaluations", "constants"), ("evaluations", "metrics"),
        ("corpus_versions", "constants"), ("corpus_versions", "names"),
        ("final_scores", "metrics"),
        ("evaluations", "status"), ("evaluations", "kind"), ("runs", "status")}


def rename(con: sqlite3.Connection, old: str, new: str) -> None:
    """Give program ``old`` the id ``new`` in every table (ids and parent lists)."""
    for table, col in sorted(IDS):
        con.execute(f"UPDATE {table} SET {col} = ? WHERE {col} = ?", (new, old))
    con.execute("UPDATE programs SET parent_ids = replace(parent_ids, ?, ?)",
                (json.dumps(old), json.dumps(new)))


def poison(archive: Path) -> str:
    """Poison ``archive`` in place; returns the id of the program whose source (and so
    id) now holds :data:`HOSTILE` (the run's pick)."""
    con = sqlite3.connect(archive)
    (pick,) = con.execute("SELECT program_id FROM frontier WHERE picked = 1 "
                          "ORDER BY generation DESC LIMIT 1").fetchone()
    (source,) = con.execute("SELECT source FROM programs WHERE id = ?", (pick,)).fetchone()
    new = source_id(source + "# " + HOSTILE + "\n")
    con.execute("UPDATE programs SET source = ? WHERE id = ?", (source + "# " + HOSTILE + "\n",
                                                                pick))
    rename(con, pick, new)
    for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        for _cid, col, kind, *_ in con.execute(f"PRAGMA table_info({table})").fetchall():
            if (table, col) in IDS | KEEP or not any(t in kind.upper() for t in ("CHAR",
                                                                               "TEXT")):
                continue
            con.execute(f"UPDATE {table} SET {col} = {col} || ? WHERE {col} IS NOT NULL",
                        (HOSTILE,))
    for rowid, consts, metrics in con.execute(
            "SELECT rowid, constants, metrics FROM evaluations WHERE constants IS NOT NULL"
    ).fetchall():
        c, m = json.loads(consts), json.loads(metrics)
        c[HOSTILE] = next(iter(c.values()))
        name, first = next(iter(m.items()))
        m[name + HOSTILE] = {**first, "reason": HOSTILE, "mode": HOSTILE, "valid": False}
        con.execute("UPDATE evaluations SET constants = ?, metrics = ? WHERE rowid = ?",
                    (json.dumps(c, sort_keys=True), json.dumps(m, sort_keys=True), rowid))
    (config,) = con.execute("SELECT config FROM runs").fetchone()
    cfg = json.loads(config)
    cfg["llm"]["model"] = HOSTILE
    cfg["run"]["data"] = HOSTILE
    con.execute("UPDATE runs SET config = ?", (json.dumps(cfg, sort_keys=True),))
    con.commit()
    con.close()
    return new
