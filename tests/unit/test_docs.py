"""The README and docs/ hold together: every relative link and image resolves to a file
of the checkout, and every #anchor to a heading of its page (GitHub's slugs)."""

import re
import shlex
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


def tree_block() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return re.search(r"## The tree\n+```\n(.*?)```", text, flags=re.S).group(1)


def package_sections() -> dict[str, str]:
    """slurm_synergy's entries in the tree: each top-level name (`model/`, `slurm.py`, ...),
    with the lines under it, indented deeper."""
    sections: dict[str, str] = {}
    block = tree_block()
    body = block[block.index("slurm_synergy/\n"):block.index("\nprofiler/")]
    current = ""
    for line in body.splitlines()[1:]:
        head = re.match(r"^  (\S.*?)\s{2,}|^  (\S+)$", line)
        if head:
            current = (head.group(1) or head.group(2)).strip()
        sections[current] = sections.get(current, "") + line + "\n"
    return sections


def test_the_architecture_tree_names_every_module_and_nothing_else():
    sections = package_sections()
    package = ROOT / "slurm_synergy"
    named_top = {n.strip() for key in sections for n in key.split(",")}
    missing, stale = [], []
    for path in sorted(package.iterdir()):
        if path.suffix == ".py" and path.stem != "__init__" and path.name not in named_top:
            missing.append(path.name)
        if path.is_dir() and (path / "__init__.py").exists():
            section = sections.get(path.name + "/")
            if section is None:
                missing.append(path.name + "/")
                continue
            for module in sorted(path.rglob("*.py")):
                if module.stem not in ("__init__", "__main__") and \
                        not re.search(rf"\b{module.stem}\b", section):
                    missing.append(str(module.relative_to(package)))
    for name in named_top:
        if name and not (package / name.rstrip("/")).exists():
            stale.append(name)
    assert (missing, stale) == ([], [])

