"""The list of environment variables (slurm_synergy/environment.py) held to the sources:
every SYNERGY_* name spelt in the package, the shim, the hooks' wrappers or the templates
is listed, each entry names exactly the files that spell it, and every variable the code
reads by name is either the product's own or one Slurm or a launcher sets."""

import re
from pathlib import Path

from slurm_synergy.environment import OUTSIDE, OWN

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("slurm_synergy/**/*.py", "profiler/*.py", "etc/*", "templates/*")
NAME = re.compile(r"\bSYNERGY_[A-Z][A-Z0-9_]*")
READ = re.compile(r"""(?:environ(?:\.get)?|getenv|env\.get|env)[\[(]\s*["']([A-Z][A-Z0-9_]*)["']""")


def spelt() -> dict[str, set[str]]:
    where: dict[str, set[str]] = {}
    for pattern in SOURCES:
        for path in ROOT.glob(pattern):
            if path.is_file() and path.name != "environment.py":
                for name in NAME.findall(path.read_text(errors="replace")):
                    where.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return where


def test_every_variable_is_listed_once_with_the_files_that_spell_it():
    listed = {v.name: {f for f in v.set_by + v.read_by if "/" in f or "." in f} for v in OWN}
    assert len(listed) == len(OWN), "a variable listed twice"
    assert spelt() == listed


def test_every_variable_read_by_name_is_known():
    read = {m.group(1) for pattern in SOURCES for path in ROOT.glob(pattern)
            if path.suffix == ".py" for m in READ.finditer(path.read_text())}
    assert read - {v.name for v in OWN} - set(OUTSIDE) == set()
