"""The report in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright for Python, opening the files from disk with every network request refused.

What it checks, as a newcomer would use the report: the frontier scatter has one point per
frontier member; clicking a point opens that program's page, which shows its source and a
diff against its parent; the LLM log's verdict filter hides and shows exchanges; no page
asks for anything but its own files; screenshots are not blank.

Setup: ``bash scripts/ci_setup_browser.sh`` (apt ``chromium`` if missing, ``pip install
-e '.[report]'``). Without Chromium or Playwright this test FAILS with that instruction,
unless ``EVOLVE_SKIP_BROWSER_TEST=1`` opts out explicitly (then it is skipped).
Screenshots go to ``$EVOLVE_REPORT_SCREENSHOTS`` if set, else a temporary directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from needs import missing

from evolve.archive import Archive
from evolve.report import write_report
from evolve.report.data import load_run

CHROMIUM = os.environ.get("EVOLVE_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]
SETUP = "run `bash scripts/ci_setup_browser.sh`"


def _browser_or_fail() -> None:
    lacking = []
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        lacking.append(f"Chromium ({CHROMIUM})")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        lacking.append("the playwright Python package")
    if lacking:
        missing(f"browser test needs {' and '.join(lacking)}", "EVOLVE_SKIP_BROWSER_TEST", SETUP)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    _browser_or_fail()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=ARGS, headless=True,
            viewport={"width": 1280, "height": 900}, service_workers="block")
        outside: list[str] = []

        def guard(route) -> None:  # the report must need nothing but its own files
            url = route.request.url
            if url.startswith(("file://", "data:", "about:")):
                route.continue_()
            else:
                outside.append(url)
                route.abort()

        ctx.route("**/*", guard)
        ctx.set_default_timeout(15_000)
        yield ctx, outside
        ctx.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    d = os.environ.get("EVOLVE_REPORT_SCREENSHOTS")
    path = Path(d) if d else tmp_path_factory.mktemp("shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _not_blank(png: Path) -> None:
    import matplotlib.image

    img = np.asarray(matplotlib.image.imread(png))[..., :3]
    assert img.shape[0] > 200 and img.shape[1] > 200, png
    ink = np.mean(np.any(np.abs(img - img[0, -1]) > 0.1, axis=-1))  # vs the background
    assert ink > 0.02 and float(img.std()) > 0.05, f"{png} looks blank ({ink:.3f} ink)"


def test_frontier_to_program_page(browser, tiny_run, shots):
    ctx, outside = browser
    archive, out = tiny_run
    with Archive(archive, create=False) as ar:
        data = load_run(ar)
    front = data.frontier_ids()  # the stored hall of fame's non-dominated part
    assert front <= {f.program_id for f in data.frontier()}
    page = ctx.new_page()
    page.goto((out / "frontier.html").as_uri())
    pts = page.locator("#scatter-train circle.front")
    assert pts.count() == len(front) > 0
    assert {pts.nth(i).get_attribute("data-id") for i in range(pts.count())} == front
    assert page.locator("#scatter-train circle.pick").count() == 1
    page.screenshot(path=shots / "frontier.png", full_page=True)
    _not_blank(shots / "frontier.png")

    # a frontier member with a parent in the run (else any program with one): click it
    with_parent = [pid for pid in [*sorted(front), *data.programs]
                   if data.programs[pid].accepted and any(q in data.programs for q in
                                                          data.programs[pid].parents)]
    target = with_parent[0]
    page.locator(f'#scatter-train circle[data-id="{target}"]').first.click()
    page.wait_for_load_state()
    assert page.url.endswith(f"/p/{target[:16]}.html")
    src = page.locator("#source").inner_text()
    assert src.strip() == data.programs[target].source.strip()
    assert page.locator("#source span.k").count() > 0  # highlighted
    diff = page.locator("pre.diff").first.inner_text()
    assert diff.startswith("@@") and ("\n+" in diff or "\n-" in diff)
    prog = data.programs[target]  # the stored rows, then the end of run's closed-loop test
    assert page.locator("#runs tbody tr").count() == (len(prog.metrics or {})
                                                      + len(prog.test_closed_loop or {}))
    page.screenshot(path=shots / "program.png", full_page=True)
    _not_blank(shots / "program.png")

    for name in ("index.html", "lineage.html", "validation.html"):
        page.goto((out / name).as_uri())
        page.screenshot(path=shots / name.replace(".html", ".png"), full_page=True)
        _not_blank(shots / name.replace(".html", ".png"))
    assert page.locator("svg.chart").count() >= 1
    page.close()
    assert outside == []


def test_llm_log_filters_by_verdict(browser, synthetic_archive, tmp_path, shots):
    ctx, outside = browser
    write_report(synthetic_archive, tmp_path / "r")
    page = ctx.new_page()
    page.goto((tmp_path / "r" / "llm.html").as_uri())
    total = page.locator(".exchange").count()
    rejected = page.locator('.exchange[data-verdict="does not parse"]').count()
    assert total > rejected > 0
    page.locator('button[data-verdict="accepted"]').click()  # hide the accepted ones
    assert page.locator(".exchange:visible").count() == rejected
    assert page.locator("#shown").inner_text() == str(rejected)
    page.screenshot(path=shots / "llm.png", full_page=False)
    _not_blank(shots / "llm.png")
    page.close()
    assert outside == []
