"""The README is a short front door and docs/ holds one page per topic: every relative link in
README.md and docs/*.md reaches a file (and, with #anchor, a heading of it), every docs page is
one click from the README and listed in docs/index.md, and the README stays short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks (a link shown in code is not a link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file."""
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(path.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        base, n = slug, 1
        while slug in found:
            slug, n = f"{base}-{n}", n + 1
        found.add(slug)
    return found


def local_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text(encoding="utf-8")))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto: are not checked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_local_link_resolves(page):
    for target in local_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: {target} does not exist"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.name}: {target}: no such heading"


def test_the_anchor_rule_is_githubs():
    page = ROOT / "docs" / "verifiers.md"
    assert "the-code-protocol-which-problems-train-which-evaluate" in anchors(page)


def test_every_docs_page_is_one_click_from_the_readme_and_in_the_index():
    readme = {(ROOT / t.partition("#")[0]).resolve() for t in local_links(ROOT / "README.md")}
    index = {(ROOT / "docs" / t.partition("#")[0]).resolve() for t in local_links(ROOT / "docs" / "index.md")}
    for page in (ROOT / "docs").glob("*.md"):
        assert page.resolve() in readme, f"README.md does not link docs/{page.name}"
        if page.name != "index.md":
            assert page.resolve() in index, f"docs/index.md does not list {page.name}"


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    quick = text[text.index("## Quick start"):]
    block = quick[quick.index("```bash"):quick.index("```", quick.index("```bash") + 3)]
    assert "vigor train " in block and "python3 -m pytest -q " in block  # the two commands (.ci/run runs the second)
    for heading in ("## Which strategy to use", "## Install", "## Train on your own task", "## On a GPU"):
        assert heading in text, heading
