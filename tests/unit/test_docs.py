"""The README and docs/ hold together: every relative link and image resolves to a file
of the checkout, and every #anchor to a heading of its page (GitHub's slugs)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [m.group(1) for m in LINK.finditer(text)
            if not m.group(1).startswith(("http://", "https://", "mailto:"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert broken == []


def test_the_readme_stays_a_short_tour():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
