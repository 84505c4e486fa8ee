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
    assert len((ROOT / "README.md").read_text().splitlines()) <= 260


def tree_block() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return re.search(r"## The tree\n+```\n(.*?)```", text, flags=re.S).group(1)


def package_sections() -> dict[str, str]:
    """slurm_synergy's entries in the tree: each top-level name (`model/`, `paths.py`, ...),
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


# --- every command shown is one the code takes ----------------------------------------
# A command in a page's code (inline or fenced): `synergy VERB [SUB] [--flag ...]`, `make
# TARGET` or a bench script; what follows a pipe, a redirection or a comment is not its own.
COMMAND = re.compile(r"(?:^|&&|;|\$\(|\()\s*(?:\$ )?(?:sudo )?(?:\S+=\S+ )*(?:\.venv/bin/)?"
                     r"(synergy|make|(?:python3? )?bench/\S+\.py)(?=\s|$)([^|>#;&)]*)")


def code_of(page: Path) -> list[str]:
    """The code on `page`: each fenced block's lines and each inline span."""
    text = page.read_text()
    fenced = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    rest = re.sub(r"```.*?```", "", text, flags=re.S)
    return [line for block in fenced for line in block.splitlines()] + \
        re.findall(r"`([^`\n]+)`", rest)


def commands_shown() -> list[tuple[str, str, list[str]]]:
    """(page, program, its words) for every command the pages show."""
    shown = []
    for page in PAGES:
        for code in code_of(page):
            for m in COMMAND.finditer(code):
                try:
                    words = shlex.split(m.group(2))
                except ValueError:
                    words = m.group(2).split()
                if m.group(1) != "synergy" or words:    # `synergy` alone names the command
                    shown.append((page.name, m.group(1), words))
    return shown


def options_of(parser) -> tuple[set[str], dict]:
    import argparse

    flags = {s for a in parser._actions for s in a.option_strings}
    subs = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            subs.update(action.choices)
    return flags, subs


def check_synergy(words: list[str]) -> str:
    """What is wrong with `synergy WORDS`, or ""."""
    from profiler.offline_profiler import build_parser as profiler_parser
    from slurm_synergy.cli import build_parser

    parser = build_parser()
    flags, subs = options_of(parser)
    positional = [w for w in words if not w.startswith("-")]
    if not positional or positional[0] not in subs:
        return f"no verb {positional[:1]}"
    verb = positional[0]
    parser = profiler_parser() if verb == "profile" else subs[verb]
    flags, subs = options_of(parser)
    if subs and len(positional) > 1 and positional[1] in subs:
        flags, _ = options_of(subs[positional[1]])
    elif subs and len(positional) > 1 and not positional[1].isupper() and \
            not re.search(r"[<./]", positional[1]):
        return f"{verb} has no {positional[1]!r}"
    unknown = [w.split("=")[0] for w in words
               if w.startswith("--") and w.split("=")[0] not in flags]
    return f"{verb}: no option {', '.join(unknown)}" if unknown else ""


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*)\s*:(?!=)", text, flags=re.M))


def check_command(program: str, words: list[str]) -> str:
    if program == "synergy":
        return check_synergy(words)
    if program == "make":
        targets = [w for w in words if not w.startswith("-") and "=" not in w]
        missing = [t for t in targets if t not in make_targets()]
        return f"no make target {', '.join(missing)}" if missing else ""
    script = ROOT / program.split()[-1]
    if not script.exists():
        return f"no {script.relative_to(ROOT)}"
    text = script.read_text()
    unknown = [w.split("=")[0] for w in words if w.startswith("--")
               and f'"{w.split("=")[0]}"' not in text]
    return f"{script.name}: no option {', '.join(unknown)}" if unknown else ""


def test_the_pages_show_commands():
    # The check below reads something: the tour and the reference pages are full of them.
    assert len(commands_shown()) > 100


def test_every_command_shown_is_one_the_code_takes():
    wrong = sorted({f"{page}: {program} {' '.join(words)}: {why}"
                    for page, program, words in commands_shown()
                    if (why := check_command(program, words))})
    assert wrong == []


# --- every message troubleshooting.md quotes is one the code prints ---------------------
SOURCES = ("slurm_synergy/**/*.py", "profiler/*.py", "etc/*.lua", "etc/*.j2", "templates/*.j2")
# What a quoted message leaves to the moment: elided text, <names>, one-letter names
# (X, P, N), a fingerprint, numbers and a script's name.
PLACEHOLDER = re.compile(r"\.\.\.|<[^>]+>|\b[A-Z]\b|\bFP\b|\b\d[\w.-]*|\bx\.py\b|: ")
# Quoted, but printed by Slurm, or with a word the code fills in (an f-string's field).
NOT_LITERAL = {
    "Requested node configuration is not available": "sbatch's own refusal",
    "Epilog error": "the reason Slurm drains a node with",
    "slurmd@node2 DOWN": "make cluster-status's table: f'{name:<13} {state:<5}'",
    "slurmctld unreachable": "slurm/runner.py: f'{daemon} unreachable'",
    "tolerance =": "policy.py: f'{name} = {value} is outside'",
    "column hetero": "csvjobs: f'column {column}: '",
    "of SLURM_JOB_GPUS NOT FOUND by nvml": "epilog.py: f'... NOT FOUND by {backend.name}'",
    "the training": "steps.py: f'the {_describe(step)} step measured nothing'",
    "offline_profiler: error": "argparse's f'{prog}: error: '",
    "synergy report --since": "a command, checked above",
    "make cluster-status": "a command, checked above",
}


def printed_text() -> str:
    """The project's sources, each string literal split over lines joined back."""
    texts = [path.read_text() for pattern in SOURCES for path in ROOT.glob(pattern)]
    return "\n".join(re.sub(r"""(["'])\s*\n\s*[rfb]*(["'])""", "", t) for t in texts)


def quoted_messages() -> list[str]:
    """Every code span in troubleshooting.md's bold text: the messages it explains."""
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    return [" ".join(code.split()) for bold in re.findall(r"\*\*(.+?)\*\*", text, flags=re.S)
            for code in re.findall(r"`([^`]+)`", bold)]


def test_troubleshooting_quotes_only_messages_the_code_prints():
    source = printed_text()
    messages = quoted_messages()
    assert len(messages) > 20
    stale = [f"{m!r}: {fragment!r}" for m in messages
             for fragment in (f.strip(" ,.()") for f in PLACEHOLDER.split(m))
             if len(fragment.split()) >= 2 and fragment not in NOT_LITERAL
             and fragment not in source]
    assert stale == []
