"""What a training script declares on its command line, read from its source.

Flags are never invented for a script: a CSV column or a profiler setting reaches the
script as an option only when its argparse declares one of the option's usual
spellings (Synergy's contract: --max_iterations, -b/--batch, -j/--workers; torchloader's:
-a/--arch, --depth, -b/--batch, -j/--workers, --epochs, --port; pytorch/examples':
-b/--batch-size, -j/--workers, --epochs). Everything else is the probe's work. The
source is parsed, not run: no import, no side effect.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Sequence

# The spellings of each option, in the order one is picked when a script declares two.
SPELLINGS: dict[str, tuple[str, ...]] = {
    "arch": ("--arch", "-a"),
    "depth": ("--depth",),
    "batch": ("--batch", "--batch-size", "--batch_size", "-b"),
    "workers": ("--workers", "--num-workers", "--num_workers", "-j"),
    "iterations": ("--max-iterations", "--max_iterations", "--max-iters", "--max_iters"),
    "epochs": ("--epochs",),
    "port": ("--port",),
    "data": ("--data",),
    "loader": ("--loader",),
}


KNOWN_LONG = frozenset(s for names in SPELLINGS.values() for s in names if s.startswith("--"))


def declared_options(script: Path) -> frozenset[str]:
    """Every option string passed to an `add_argument` call in the script's source (also
    through an alias, `add = parser.add_argument`); empty for a program that is not
    Python or a file that does not parse.

    A one-letter option counts only beside a long spelling we know (`-b, --batch-size`):
    alone, `-b` may be anything (`--beta`), and a value passed to it would be wrong."""
    try:
        tree = ast.parse(Path(script).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    aliases = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and isinstance(node.value, ast.Attribute) and node.value.attr == "add_argument"
               for t in node.targets if isinstance(t, ast.Name)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument")
                or (isinstance(node.func, ast.Name) and node.func.id in aliases)):
            names = {a.value for a in node.args if isinstance(a, ast.Constant)
                     and isinstance(a.value, str) and a.value.startswith("-")}
            if not names & KNOWN_LONG:
                names = {n for n in names if n.startswith("--")}
            found.update(names)
    return frozenset(found)


def spellings(option: str, declared: frozenset[str]) -> list[str]:
    """Every spelling of `option` (a key of SPELLINGS) the script declares, ours first."""
    return [s for s in SPELLINGS[option] if s in declared]


def spelling(option: str, declared: frozenset[str]) -> str | None:
    """How the script spells `option`, or None if it does not."""
    return next(iter(spellings(option, declared)), None)


def without(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """argv without these options and their values (`-j 4`, `--workers=4`, `-j4`)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in names:
            skip = True
            continue
        name = arg.split("=", 1)[0]
        if arg.startswith("--") and name in names:
            continue
        if any(len(n) == 2 and arg.startswith(n) and arg[2:].isdigit() for n in names):
            continue
        out.append(arg)
    return out


def value_of(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The last value argv gives any of these options."""
    found = None
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--") and arg.split("=", 1)[0] in names and "=" in arg:
            found = arg.split("=", 1)[1]
        elif any(len(n) == 2 and arg.startswith(n) and arg[2:].isdigit() for n in names):
            found = arg[2:]
    return found
