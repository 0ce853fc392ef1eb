"""The README's relative links lead somewhere: the file exists and, for a Markdown page,
the ``#anchor`` is one of its headings (a bare ``#anchor`` is the README's own).

Why: ``mkdocs build --strict`` checks the links inside ``docs/`` only, and the README sits
outside it; when a docs page is split or a heading renamed, the README is the first thing a
user reads and the one link nothing else would catch.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*```")


def heading_anchors(page: Path) -> set[str]:
    """The anchors Python-Markdown's ``toc`` gives a page's headings (code fences skipped)."""
    anchors: set[str] = set()
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = None if in_fence else HEADING.match(line)
        if m:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)).replace("`", "")
            anchors.add(slugify(text, "-"))
    return anchors


def relative_links(page: Path) -> list[str]:
    """Every link target in ``page`` that is not a URL (a bare ``#anchor`` is the page's)."""
    return [t for t in LINK.findall(page.read_text(encoding="utf-8"))
            if not re.match(r"^[a-z]+:", t)]


def test_heading_anchors_follow_mkdocs():
    page = ROOT / "docs" / "blis.md"
    anchors = heading_anchors(page)
    assert "where-bliss-batches-differ-from-ours" in anchors
    assert "the-engine-loop-carry-vllms-into-blis" in anchors


@pytest.mark.parametrize("name", ["README.md", "CHANGELOG.md"])
def test_relative_links_resolve(name):
    page = ROOT / name
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{name}: " + "; ".join(broken)


def test_a_renamed_heading_is_caught(tmp_path):
    (tmp_path / "page.md").write_text("# Title\n\n## Old name\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("[x](page.md#new-name) [y](page.md#old-name)\n",
                                        encoding="utf-8")
    links = relative_links(tmp_path / "README.md")
    anchors = heading_anchors(tmp_path / "page.md")
    assert [t.partition("#")[2] in anchors for t in links] == [False, True]
