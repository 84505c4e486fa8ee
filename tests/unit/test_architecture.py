"""The layout docs/architecture.md describes, kept: the core (slurm_synergy/model)
imports nothing else of the project, nor does the built-in trainer, no two modules
nor two packages import each other round a cycle, the report and the node hooks build on
the core alone, nothing edits sys.path,
only the slurm package runs Slurm's commands, no module is over 450 lines, and every
public function and method has a docstring."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("slurm_synergy", "profiler")
# The built-in trainer: a user may read it, copy it, or run it without the rest.
TRAINER = ("profiler.train", "profiler.models", "profiler.data", "profiler.datagen",
           "profiler.record")
SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "sacctmgr", "scontrol", "scancel", "sinfo")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project's modules `name` imports, anywhere in it (lazy imports too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_imports_are_absolute():
    relative = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in modules().values()
                for n in ast.walk(ast.parse(p.read_text()))
                if isinstance(n, ast.ImportFrom) and n.level]
    assert relative == []


def test_the_core_imports_nothing_above_it():
    above = {f"{m} -> {t}" for m, ts in graph().items() if m.startswith("slurm_synergy.model")
             for t in ts if not t.startswith("slurm_synergy.model")}
    assert above == set()


def test_the_trainer_imports_nothing_else_of_the_project():
    outside = {f"{m} -> {t}" for m in TRAINER for t in graph()[m] if t not in TRAINER}
    assert outside == set()


def test_nothing_edits_sys_path():
    # Jobs run the profiler and the trainer as modules of the install (python -m). The
    # probe's boot file is the exception: it starts inside users' own interpreters, which
    # may not have the package installed, and takes its path entry out again. The warm
    # interpreter sets a forked script's first entry, as Python does when it starts one.
    edit = re.compile(r"sys\.path(\[.*\])?\s*(=|\.insert|\.append)")
    allowed = ("probe/boot", "probe/warm.py")
    edits = [str(p.relative_to(ROOT)) for p in modules().values()
             if not any(a in str(p) for a in allowed) and edit.search(p.read_text())]
    assert edits == []


def cycles_of(edges: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    return cycles


def test_no_import_cycles():
    # A package importing its own submodules (its public names) is not a cycle.
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph().items()}
    assert cycles_of(edges) == []


def package_of(module: str) -> str:
    """slurm_synergy's subpackage or top-level module that `module` is in (the package
    itself for its __init__); the other top-level packages whole."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "slurm_synergy" else parts[0]


def package_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, targets in graph().items():
        edges.setdefault(package_of(module), set()).update(
            package_of(t) for t in targets if package_of(t) != package_of(module))
    edges.pop("slurm_synergy", None)     # __init__: the version, imported for paths' sake
    return {m: ts - {"slurm_synergy"} for m, ts in edges.items()}


def test_no_import_cycles_between_packages():
    assert cycles_of(package_graph()) == []


def test_the_report_and_the_node_hooks_build_on_the_core_alone():
    above = {"slurm_synergy." + p for p in
             ("decisions", "submission", "plugin", "measure", "cli", "cluster", "tune")}
    g = package_graph()
    wrong = {f"{p} -> {t}" for p in ("slurm_synergy.report", "slurm_synergy.hooks")
             for t in g[p] & above}
    assert wrong == set()


def in_slurm_package(name: str) -> bool:
    """Whether module `name` is the slurm package or one of its modules (not slurmconf)."""
    return name == "slurm_synergy.slurm" or name.startswith("slurm_synergy.slurm.")


def test_only_the_slurm_package_runs_slurm_commands():
    pattern = re.compile(r"""\[\s*["'](%s)["']""" % "|".join(SLURM_COMMANDS))
    callers = [f"{p.relative_to(ROOT)}: {m.group(1)}" for name, p in modules().items()
               if not in_slurm_package(name) for m in pattern.finditer(p.read_text())]
    assert callers == []


def test_a_job_comment_is_changed_through_slurm_mark_alone():
    # After submission a comment is read, changed by its marks and written back in one
    # place (Slurm.mark); an update naming Comment anywhere else would be a second writer.
    write = re.compile(r"""["']Comment["']\s*:|\[["']Comment["']\]\s*=[^=]""")
    writers = [f"{p.relative_to(ROOT)}" for name, p in modules().items()
               if not in_slurm_package(name) and write.search(p.read_text())]
    assert writers == []


LONGEST = 450      # lines: a module a newcomer reads in one sitting


def test_modules_are_short():
    long = [f"{p.relative_to(ROOT)}: {n}" for p in modules().values()
            if (n := len(p.read_text().splitlines())) > LONGEST]
    assert long == []


def test_every_public_function_says_what_it_does():
    bare = [f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"
            for p in modules().values()
            for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not node.name.startswith("_") and not ast.get_docstring(node)]
    assert bare == []


def test_unit_tests_are_named_for_what_they_test_and_share_helpers_in_one_place():
    # test_<module>.py, test_<package>[_<module>].py, or one of those and an aspect
    # (test_render_golden.py); test_job_submit.py is the Lua shim's. Integration tests are
    # named for the flow they drive on the real cluster instead.
    names = {"job_submit", "architecture", "docs"}
    for name in modules():
        parts = [p for p in name.split(".")[1:] if p != "__main__"]
        names.update({parts[-1], "_".join(parts)} if parts else set())
        names.add(name.split(".")[0] + "_" + "_".join(parts))
    tests = sorted((ROOT / "tests" / "unit").glob("test_*.py"))
    unnamed = [t.name for t in tests
               if not any(t.stem[5:] == n or t.stem[5:].startswith(n + "_") for n in names)]
    # Absolute or relative: `from .test_engine import profile` is one test reaching into another.
    shared = [f"{t.name}: {m.group(0).strip()}" for t in (ROOT / "tests").rglob("test_*.py")
              for m in re.finditer(r"^\s*(from|import)\s+(tests\.(unit|integration)\.|\.)test_\w+",
                                   t.read_text(), flags=re.M)]
    assert (unnamed, shared) == ([], [])
