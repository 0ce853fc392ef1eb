"""Issue 56: an archive is untrusted input. A tampered copy of a finished run goes through
every command that reads an archive (show, frontier, runs, report, export-go, replay,
validate): program ids holding path separators, quotes, angle brackets and control bytes
are refused on read with one line (a report once wrote ``p/../../x.html`` and ran an
injected ``onerror``); markup and terminal escapes in every other string column are shown
escaped, never sent or rendered; a source that does not hash to its id is refused, or in
the report marked. No command writes outside its ``--out``, none leaves a traceback file.
(The report of such an archive in a real browser: tests/evolve/report/test_report_untrusted.py.)"""

from __future__ import annotations

import json
import re
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import pytest

from evolve.archive.ids import source_id
from evolve.cli.main import main

pytestmark = pytest.mark.real_data

MARKUP = '"><img src=x onerror="document.title=\'pwned\'"><script>alert(1)</script>'
CONTROL = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202e"
HOSTILE = MARKUP + CONTROL + "/../../../evil"
# what a terminal would obey: C0 but newline and tab, DEL, C1, bidi overrides
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
ID_TABLES = (("programs", "id"), ("evaluations", "program_id"), ("grid_cells", "program_id"),
             ("frontier", "program_id"), ("corpus_versions", "program_id"),
             ("final_scores", "program_id"))
JSON_COLUMNS = {("runs", "config"), ("runs", "splits"), ("programs", "parent_ids"),
                ("evaluations", "constants"), ("evaluations", "metrics"),
                ("corpus_versions", "constants"), ("corpus_versions", "names"),
                ("final_scores", "metrics")}


def commands(pid: str, out: Path) -> dict[str, list[str]]:
    """Every command that reads an archive, on the program ``pid`` (a prefix)."""
    return {"show": ["show", pid], "frontier": ["frontier"], "runs": ["runs"],
            "report": ["report", "--out", str(out / "report")],
            "export-go": ["export-go", pid, "-o", str(out / "x.go")],
            "replay": ["replay", pid],
            "validate": ["validate", pid, "--out", str(out / "val")]}


def elements(html: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Every element of a page as the browser's parser sees it: (tag, attributes)."""
    tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    class Parser(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            tags.append((tag, attrs))

    Parser().feed(html)
    return tags


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _run(argv: list[str], archive: Path, capsys, crash_dir: Path) -> tuple[int, str, str]:
    code = main([*argv, "--archive", str(archive)])
    out, err = capsys.readouterr()
    assert code in (0, 1, 2)
    assert code != 1, err  # never an internal error
    assert not any(crash_dir.iterdir()), "a traceback file was written"
    assert not RAW.search(out + err), repr((out + err)[:400])  # shown escaped, never sent
    if code == 2:
        assert err.count("\n") == 1, err
    return code, out, err


def _pick(archive: Path) -> str:
    con = sqlite3.connect(archive)
    pid = con.execute("SELECT program_id FROM frontier WHERE picked = 1 LIMIT 1").fetchone()[0]
    con.close()
    return str(pid)


def _rename(archive: Path, old: str, new: str) -> None:
    """Give program ``old`` the id ``new`` in every table (ids and parent lists)."""
    con = sqlite3.connect(archive)
    for table, col in ID_TABLES:
        con.execute(f"UPDATE {table} SET {col} = ? WHERE {col} = ?", (new, old))
    con.execute("UPDATE programs SET parent_ids = replace(parent_ids, ?, ?)",
                (json.dumps(old), json.dumps(new)))
    con.commit()
    con.close()


@pytest.mark.parametrize("suffix", ["/../../../evil", MARKUP + CONTROL])
@pytest.mark.parametrize("command", ["show", "frontier", "runs", "report", "export-go",
                                     "replay", "validate"])
def test_an_id_that_is_no_id_is_refused_by_every_reader(finished, tmp_path, capsys,
                                                        crash_dir, command, suffix):
    pid = _pick(finished)
    _rename(finished, pid, pid[:12] + suffix)  # found by its hex prefix, as users type it
    (tmp_path / "out").mkdir()
    before = _files(tmp_path)
    code, _out, err = _run(commands(pid[:12], tmp_path / "out")[command], finished, capsys,
                           crash_dir)
    assert code == 2 and "not a program id (64 hex digits)" in err, err
    assert _files(tmp_path) == before  # nothing written, inside --out or out of it
    assert not (tmp_path.parent / "evil").exists()


def test_a_parent_id_that_is_no_id_is_refused(finished, tmp_path, capsys, crash_dir):
    pid = _pick(finished)
    con = sqlite3.connect(finished)
    con.execute("UPDATE programs SET parent_ids = ? WHERE id = ?",
                (json.dumps(["../../../evil" + MARKUP]), pid))
    con.commit()
    con.close()
    for command in ("show", "report"):
        code, _out, err = _run(commands(pid[:12], tmp_path)[command], finished, capsys,
                               crash_dir)
        assert code == 2 and "programs.parent_ids" in err and "not a program id" in err


def _poison(archive: Path, keep_status: bool) -> None:
    """Append markup and control bytes to every text column but the ids and the JSON ones
    (status columns too unless ``keep_status``), and put them in the JSON ones: a constant
    group, a run's metrics, the stored configuration."""
    con = sqlite3.connect(archive)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for table in tables:
        for _cid, col, kind, *_ in con.execute(f"PRAGMA table_info({table})").fetchall():
            if ((table, col) in ID_TABLES or (table, col) in JSON_COLUMNS
                    or (table, col) == ("programs", "source")  # its id is its hash: below
                    or table in ("schema_version", "journal", "run_locks")
                    or ("CHAR" not in kind.upper() and "TEXT" not in kind.upper())
                    or (keep_status and col in ("status", "kind"))):
                continue
            con.execute(f"UPDATE {table} SET {col} = {col} || ? WHERE {col} IS NOT NULL",
                        (HOSTILE,))
    for rowid, consts, metrics in con.execute(
            "SELECT rowid, constants, metrics FROM evaluations WHERE constants IS NOT NULL"
    ).fetchall():
        c, m = json.loads(consts), json.loads(metrics)
        c[HOSTILE] = next(iter(c.values()))
        name, first = next(iter(m.items()))
        m[name + HOSTILE] = {**first, "reason": HOSTILE, "mode": HOSTILE}
        con.execute("UPDATE evaluations SET constants = ?, metrics = ? WHERE rowid = ?",
                    (json.dumps(c, sort_keys=True), json.dumps(m, sort_keys=True), rowid))
    (config,) = con.execute("SELECT config FROM runs").fetchone()
    cfg = json.loads(config)
    cfg["llm"]["model"] = HOSTILE
    cfg["operator"]["kind"] += HOSTILE
    con.execute("UPDATE runs SET config = ?", (json.dumps(cfg, sort_keys=True),))
    con.commit()
    con.close()


@pytest.mark.parametrize("keep_status", [True, False])
def test_markup_and_escapes_in_every_string_column_are_shown_escaped(
        finished, tmp_path, capsys, crash_dir, keep_status):
    old = _pick(finished)
    con = sqlite3.connect(finished)  # the pick's source gets them too, under its new hash
    (source,) = con.execute("SELECT source FROM programs WHERE id = ?", (old,)).fetchone()
    con.execute("UPDATE programs SET source = ? WHERE id = ?", (source + HOSTILE, old))
    con.commit()
    con.close()
    pid = source_id(source + HOSTILE)
    _rename(finished, old, pid)
    _poison(finished, keep_status)
    cmds = commands(pid[:12], tmp_path / "out")
    (tmp_path / "out").mkdir()
    if keep_status:  # accepted programs with hostile strings: the slow commands would
        del cmds["replay"], cmds["validate"]  # simulate (nothing of these reaches them)
    before = _files(tmp_path)
    codes = {}
    for name, argv in cmds.items():
        codes[name], out, err = _run(argv, finished, capsys, crash_dir)
        if name in ("show", "runs", "frontier"):
            assert codes[name] == 0, err
        if name in ("show", "runs"):
            assert "\\x1b[2J" in out  # the status or operator, shown escaped
    report = tmp_path / "out" / "report"
    assert codes["report"] == 0
    new = _files(tmp_path) - before
    assert new and all(report in p.parents or p.parent == tmp_path / "out" for p in new)
    for page in report.rglob("*.html"):
        tags = elements(page.read_text())
        assert not [t for t in tags if t[0] == "img"], page  # (the report draws no <img>)
        assert [t[0] for t in tags].count("script") == 1, page
        assert not [t for t in tags if any(a.startswith("on") for a, _v in t[1])], page
        for href in (v or "" for t in tags for a, v in t[1] if a == "href"):
            target = (page.parent / href.split("#")[0]).resolve()
            assert ":" not in href and report.resolve() in target.parents, (page, href)
    index = (report / "index.html").read_text()
    assert "&lt;img src=x onerror=" in index  # shown, as text
    if not keep_status:  # nothing is accepted any more: no simulation, one line each
        assert codes["replay"] == codes["validate"] == 2


def test_an_edited_source_is_marked_in_the_report(finished, tmp_path, capsys, crash_dir):
    """(show, export-go, validate and replay refuse it: test_commands.py.)"""
    pid = _pick(finished)
    con = sqlite3.connect(finished)
    con.execute("UPDATE programs SET source = source || '\n# edited' WHERE id = ?", (pid,))
    con.commit()
    con.close()
    code, _out, _err = _run(["report", "--out", str(tmp_path / "r")], finished, capsys,
                            crash_dir)
    assert code == 0
    page = (tmp_path / "r" / "p" / f"{pid[:16]}.html").read_text()
    assert 'id="edited"' in page and 'badge edited' in page
    assert "edited sources" in (tmp_path / "r" / "index.html").read_text()
