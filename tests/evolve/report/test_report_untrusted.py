"""Issue 56: the report of an archive is a page of untrusted text. Every string of a
hostile archive (tests/support/hostile.py) is shown as text in real Chromium: no injected
element, no handler, no script runs; the content security policy allows the report's one
script by hash, so a handler that got through would still not run. And ``--out`` is the
report's own: a folder of someone's files is refused, and regenerating never deletes a
file the report did not write (a user's ``p/notes.html`` once went as a "stale page")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hostile import HOSTILE, poison
from test_report_browser import browser  # noqa: F401 - the shared Chromium fixture

from evolve.cli.main import main
from evolve.report import write_report
from evolve.report.outdir import MARKER

PAGES = ("index.html", "frontier.html", "lineage.html", "llm.html", "validation.html")
PROBE = """() => {
  const handlers = [];
  for (const el of document.querySelectorAll("*"))
    for (const a of el.attributes)
      if (a.name.startsWith("on") || /^\\s*javascript:/i.test(a.value))
        handlers.push(el.tagName + " " + a.name);
  return {title: document.title, imgs: document.querySelectorAll("img:not(.plot)").length,
          scripts: document.scripts.length, handlers: handlers,
          pwned: document.title.includes("pwned")};
}"""


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory, synthetic_archive) -> tuple[Path, str]:
    d = tmp_path_factory.mktemp("hostile")
    archive = d / "h.db"
    shutil.copy(synthetic_archive, archive)
    pid = poison(archive)
    write_report(archive, d / "r")
    return d / "r", pid


def test_no_archive_string_runs_or_injects_anything_in_chromium(browser, hostile_report):  # noqa: F811
    ctx, outside = browser
    out, pid = hostile_report
    dialogs: list[str] = []
    for name in (*PAGES, f"p/{pid[:16]}.html"):
        page = ctx.new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto((out / name).as_uri())
        page.wait_for_load_state("load")
        got = page.evaluate(PROBE)
        assert not got["pwned"] and got["imgs"] == 0 and got["handlers"] == [], (name, got)
        assert got["scripts"] == 1, (name, got)  # the report's own, nothing injected
        assert HOSTILE[:20] in page.content() or name == "validation.html" or \
            "&lt;img src=x" in page.content()
        page.close()
    assert dialogs == [] and outside == []
    # the hostile source is shown, as text, on its page; the report's own script still runs
    page = ctx.new_page()
    page.goto((out / "p" / f"{pid[:16]}.html").as_uri())
    assert '<img src=x onerror="document.title' in page.locator("#source").inner_text()
    page.goto((out / "index.html").as_uri())
    th = page.locator("#generations th").first
    th.click()
    assert th.get_attribute("data-dir") == "asc"  # sorting works: the hashed script ran
    page.close()


def test_the_policy_blocks_an_injected_handler(browser, hostile_report, tmp_path):  # noqa: F811
    """Were escaping ever to fail, the page's own policy still refuses inline script."""
    ctx, _outside = browser
    out, _pid = hostile_report
    html = (out / "index.html").read_text()
    assert "script-src 'sha256-" in html and "unsafe-inline'; img" not in html
    injected = html.replace("<main>", '<main><img src="x" onerror="document.title=\'pwned\'">'
                            "<script>document.title='pwned'</script>"
                            '<svg><a href="javascript:document.title=\'pwned\'"><text>'
                            "x</text></a></svg>", 1)
    (out / "injected.html").write_text(injected)
    page = ctx.new_page()
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in
            m.text else None)
    page.goto((out / "injected.html").as_uri())
    page.wait_for_load_state("load")
    page.locator("svg a").first.dispatch_event("click")
    page.wait_for_timeout(200)
    assert "pwned" not in page.evaluate("document.title")
    assert violations  # refused, and said so
    page.close()
    (out / "injected.html").unlink()


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_a_folder_of_someone_elses_files_is_refused(synthetic_archive, tmp_path, capsys):
    out = tmp_path / "mine"
    (out / "p").mkdir(parents=True)
    (out / "index.html").write_text("my index")
    (out / "p" / "notes.html").write_text("my notes")
    assert main(["report", "--archive", str(synthetic_archive), "--out", str(out)]) == 2
    assert "not empty and not an evolve report" in _err(capsys)
    assert (out / "index.html").read_text() == "my index"
    assert sorted(p.name for p in out.rglob("*")) == ["index.html", "notes.html", "p"]


def test_an_earlier_report_is_rewritten_and_only_its_own_files_go(
        synthetic_archive, tiny_run, tmp_path, capsys):
    out = tmp_path / "r"
    first = write_report(synthetic_archive, out)  # an LLM run: llm.html, more programs
    listed = set(json.loads((out / MARKER).read_text())["files"])
    assert len(listed) == first.pages and "llm.html" in listed
    (out / "p" / "notes.html").write_text("mine")
    (out / "notes.txt").write_text("mine")
    second = write_report(tiny_run[0], out)
    now = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert now == set(json.loads((out / MARKER).read_text())["files"]) | {
        MARKER, "notes.txt", "p/notes.html"}
    assert second.pages == len(now) - 3 and "llm.html" not in now  # the first's are gone


def test_a_report_from_before_the_marker_is_taken_over_deleting_nothing(
        synthetic_archive, tmp_path):
    out = tmp_path / "old"
    write_report(synthetic_archive, out)
    (out / MARKER).unlink()  # as an earlier evolve wrote it
    stale = out / "p" / ("f" * 16 + ".html")
    stale.write_text("an old page")
    write_report(synthetic_archive, out)
    assert stale.exists() and (out / MARKER).exists()


def test_p_may_not_lead_out_of_the_folder(synthetic_archive, tmp_path, capsys):
    out, elsewhere = tmp_path / "r", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / MARKER).write_text('{"files": []}')
    (out / "p").symlink_to(elsewhere)
    assert main(["report", "--archive", str(synthetic_archive), "--out", str(out)]) == 2
    assert "its p/ is not a directory inside it" in _err(capsys)
    assert not any(elsewhere.iterdir())


def test_run_report_into_someone_elses_folder_is_refused_before_the_search(
        tmp_path, data_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["run", "--generations", "0", "--data", str(data_path), "--archive",
                 str(tmp_path / "a.db"), "--report", str(out)]) == 2
    assert "not empty and not an evolve report" in _err(capsys)
    assert not (tmp_path / "a.db").exists()
