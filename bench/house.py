"""The house's counts (issue 59): how big its modules are, how many places write a job's
comment, load the site's policy or read the environment, how many public functions say
nothing of themselves, and whether any import runs round a cycle or back up a layer.

    .venv/bin/python bench/house.py          # prints one markdown table

Counts, not timings: they are read from the source (ast and a few patterns), so one run
decides them. The import graph is the architecture test's, so the two agree."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.unit.test_architecture import (  # noqa: E402
    cycles_of, graph, modules, package_graph)

LIMIT = 450
# A job's comment is written to Slurm by an update naming Comment (COMMENT: in Slurm.mark),
# by sbatch's --comment (a job script's #SBATCH line too), or by the shim's job_desc.comment.
COMMENT_WRITES = re.compile(r'"Comment":|\["Comment"\]\s*=[^=]|\bCOMMENT:|--comment=|'
                            r'job_desc\.comment\s*=[^=]')
POLICY_LOADS = re.compile(r"\b(load_policy|load_site|site_catalog|Site\.load)\(")
ENV_READS = re.compile(r"\bos\.environ\b|\bos\.getenv\(")
ENV_NAMES = re.compile(r"\bSYNERGY_[A-Z][A-Z0-9_]*")
# Above the core (model) sit the rest; the report and the node hooks build on the core alone.
ABOVE = ("decisions", "submission", "plugin", "measure", "cli", "cluster", "tune")


def public_functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not n.name.startswith("_")]


def counts() -> dict[str, str]:
    """Each count by name, as the table shows it."""
    found = modules()
    texts = {name: p.read_text() for name, p in found.items()}
    sizes = sorted(((len(t.splitlines()), n) for n, t in texts.items()), reverse=True)
    code = list(texts.values())
    lua = (ROOT / "etc" / "job_submit.lua").read_text()
    templates = [p.read_text() for p in (ROOT / "templates").glob("*.j2")]
    publics = [f for t in code for f in public_functions(ast.parse(t))]
    bare = [f for f in publics if not ast.get_docstring(f)]
    policy = sum(len([m for m in POLICY_LOADS.finditer(t)
                      if not t[max(0, m.start() - 4):m.start()].endswith("def ")]) for t in code)
    env_sites = {n: len(ENV_READS.findall(t)) for n, t in texts.items()}
    env_names = set(ENV_NAMES.findall("\n".join(code) + lua + "".join(
        p.read_text() for p in (ROOT / "etc").glob("*.j2"))))
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph().items()}
    packages = package_graph()
    back_up = [f"{m} -> {t}" for m, ts in graph().items() if m.startswith("slurm_synergy.model")
               for t in ts if not t.startswith("slurm_synergy.model")]
    back_up += [f"{p} -> {t}" for p in ("slurm_synergy.report", "slurm_synergy.hooks")
                for t in packages.get(p, ()) if t.removeprefix("slurm_synergy.") in ABOVE]
    return {
        "modules": str(len(found)),
        "largest module (lines)": f"{sizes[0][0]} ({sizes[0][1]})",
        f"modules over {LIMIT} lines": str(sum(1 for s, _ in sizes if s > LIMIT)),
        "places that write a job's comment": str(sum(len(COMMENT_WRITES.findall(t))
                                                     for t in code + [lua] + templates)),
        "policy loads (call sites)": str(policy),
        "environment reads (sites / modules)":
            f"{sum(env_sites.values())} / {sum(1 for v in env_sites.values() if v)}",
        "SYNERGY_* variables": str(len(env_names)),
        "public functions without a docstring": f"{len(bare)} of {len(publics)}",
        "import cycles (modules / packages)":
            f"{len(cycles_of(edges))} / {len(cycles_of(packages))}",
        "arrows back up a layer": str(len(back_up)),
    }


def main() -> None:
    print("| count | value |\n|---|---|")
    for name, value in counts().items():
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
