"""The archive: schema checks, one-line errors, per-generation transactions, canonical JSON."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy.exc import IntegrityError

from evolve.archive import Archive
from evolve.archive.models import Evaluation, ProgramRow, SchemaVersion
from evolve.errors import ArchiveError

P1, P2 = "1" * 64, "2" * 64  # program ids: 64 hex digits (checked on every read)


def _program(run_id: int, pid: str, g: int = 0, seq: int = 0) -> ProgramRow:
    return ProgramRow(run_id=run_id, id=pid, seq=seq, source="x", parent_ids=[],
                      operator="seed:x", generation=g, complexity=3, n_features=1,
                      fingerprint="fp")


def test_create_and_reopen(tmp_path):
    path = tmp_path / "a.db"
    with Archive(path) as a:
        rid = a.create_run(3, {"b": 1.0, "a": [1, 2]}, {"s": "train"}, b"probe")
        assert rid == 1
        assert a.create_run(4, {}, {}, None) == 2
    with Archive(path, create=False) as a:
        runs = a.runs()
        assert [r.seed for r in runs] == [3, 4]
        assert runs[0].config == {"a": [1, 2], "b": 1.0}
        assert runs[0].status == "running" and runs[0].generations_done == -1
        assert a.latest_run_id() == 2


def test_json_columns_are_canonical(tmp_path):
    path = tmp_path / "a.db"
    with Archive(path) as a:
        rid = a.create_run(0, {"z": 0.1, "a": {"y": 1e-300, "x": float("inf")}}, {}, None)
    con = sqlite3.connect(path)
    raw = con.execute("select config from runs where id=?", (rid,)).fetchone()[0]
    con.close()
    assert raw == '{"a":{"x":Infinity,"y":1e-300},"z":0.1}'


def test_generation_is_one_transaction(tmp_path):
    with Archive(tmp_path / "a.db") as a:
        rid = a.create_run(0, {}, {}, None)
        a.commit_generation(rid, 0, [_program(rid, P1)])
        assert a.run(rid).generations_done == 0
        # a failing row (duplicate key) rolls back the whole generation
        with pytest.raises(IntegrityError):
            a.commit_generation(rid, 1, [_program(rid, P2, 1), _program(rid, P1, 1, 1)])
        assert a.run(rid).generations_done == 0
        assert [p.id for p in a.programs(rid)] == [P1]


def test_resolve_id(tmp_path):
    with Archive(tmp_path / "a.db") as a:
        rid = a.create_run(0, {}, {}, None)
        abc1, abd2 = "abc1" + "0" * 60, "abd2" + "0" * 60
        a.commit_generation(rid, 0, [_program(rid, abc1), _program(rid, abd2, 0, 1)])
        assert a.resolve_id("abc") == abc1
        with pytest.raises(ArchiveError, match="ambiguous"):
            a.resolve_id("ab")
        with pytest.raises(ArchiveError, match="no program"):
            a.resolve_id("zz")
        with pytest.raises(ArchiveError, match="no program"):
            a.resolve_id("a%")


def test_missing_archive(tmp_path):
    with pytest.raises(ArchiveError, match="archive not found"):
        Archive(tmp_path / "none.db", create=False)
    (tmp_path / "empty.db").touch()  # e.g. left by a run killed as it started
    with pytest.raises(ArchiveError, match=r"empty\.db: an empty file, no archive yet"):
        Archive(tmp_path / "empty.db", create=False)


def test_not_sqlite(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database at all, just some bytes" * 20)
    with pytest.raises(ArchiveError) as err:
        Archive(path)
    assert "not an evolve archive" in str(err.value) and "\n" not in str(err.value)


def test_truncated_sqlite_is_corrupt(tmp_path):
    path = tmp_path / "a.db"
    with Archive(path) as a:
        a.create_run(0, {"x": "y" * 10000}, {}, None)
    data = path.read_bytes()
    path.write_bytes(data[:100] + b"\x00" * 200 + data[300:1500])
    with pytest.raises(ArchiveError, match="corrupt archive") as err:
        Archive(path, create=False)
    assert "\n" not in str(err.value)


def test_other_sqlite_file(tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("create table t (x int)")
    con.commit()
    con.close()
    with pytest.raises(ArchiveError, match="no schema_version"):
        Archive(path)


def test_schema_version_mismatch(tmp_path):
    path = tmp_path / "a.db"
    with Archive(path) as a, a.session() as s:
        s.query(SchemaVersion).update({SchemaVersion.version: 99})
        s.commit()
    with pytest.raises(ArchiveError, match="schema version 99"):
        Archive(path)


def test_latest_accepted_and_counts(tmp_path):
    with Archive(tmp_path / "a.db") as a:
        rid = a.create_run(0, {}, {}, None)

        def ev(g, seq, kind, status, loss):
            return Evaluation(run_id=rid, generation=g, seq=seq, program_id=P1, kind=kind,
                              operator="o", corpus_version="v", constants={}, metrics={},
                              loss=loss, complexity=1, n_evals=1, status=status, reason="")

        a.commit_generation(rid, 0, [ev(0, 0, "seed", "accepted", 2.0)])
        a.commit_generation(rid, 1, [ev(1, 0, "child", "rejected", float("inf")),
                                     ev(1, 1, "rescore", "accepted", 1.5)])
        assert a.latest_accepted(rid)[P1].loss == 1.5
        assert a.count_evaluations(rid, ("child",)) == 1
        assert a.llm_usage(rid) == (0, 0.0)
        comp = a.comparable()
        assert "created_at" not in comp["runs"][0]
        assert [r["seq"] for r in comp["evaluations"]] == [0, 0, 1]


def test_on_frontier_marks_the_non_dominated_hall_of_fame_rows():
    from evolve.archive.models import FrontierRow, on_frontier

    def row(pos: int, loss: float, cx: int) -> FrontierRow:
        return FrontierRow(run_id=1, generation=3, position=pos, program_id=f"p{pos}",
                           loss=loss, complexity=cx, picked=False)

    hall = [row(0, 0.5, 2), row(1, 0.3, 4), row(2, 0.35, 6), row(3, 0.3, 8), row(4, 0.2, 9)]
    assert on_frontier(hall) == [True, True, False, False, True]  # ties are dominated too
    assert on_frontier(list(reversed(hall))) == [True, False, False, True, True]
    # archives from before the hall of fame stored the frontier alone: all of it is on it
    assert on_frontier([hall[0], hall[1], hall[4]]) == [True, True, True]
    assert on_frontier([]) == []


@pytest.mark.parametrize("url", ["postgresql://u@h:abc/db?password=pw",
                                 "postgresql://u@h:99999/db?password=pw"])
def test_an_archive_url_with_a_bad_port_is_one_line_without_its_password(url):
    with pytest.raises(ArchiveError, match=r"password=\*\*\*.*not an archive") as info:
        Archive(url, create=False)
    assert "pw" not in str(info.value).replace("password", "") and "\n" not in str(info.value)


def test_ids_that_are_no_ids_are_refused_on_read(tmp_path):
    with Archive(tmp_path / "a.db") as a:
        rid = a.create_run(0, {"llm": {"base_url": "http://u:pw@h/v1?api_key=pw"}}, {}, None)
        a.commit_generation(rid, 0, [_program(rid, "../../x")])
        assert a.run(rid).config["llm"]["base_url"] == "http://u:***@h/v1?api_key=***"
        with pytest.raises(ArchiveError, match=r"programs\.id holds '\.\./\.\./x', not a "
                                               r"program id \(64 hex digits\)"):
            a.programs(rid)
