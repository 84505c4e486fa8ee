"""Every job shape with known memory and CPU use (tests/shapes.py), reported by
`synergy report` (with the node hooks' cgroup readings, and from sacct alone) and by
reportseff side by side, against the truth. Submits the shapes to
the cluster of SLURM_CONF or the local one (brought up if needed), waits for them, and
writes the comparison to bench/results/report_shapes.json and a table to stdout.

reportseff is installed from PyPI into a folder of its own (never the project's venv).

    make bench        # or: .venv/bin/python bench/bench_report_shapes.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import venv
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402
from slurm_synergy import paths  # noqa: E402
from slurm_synergy.report import output  # noqa: E402
from slurm_synergy.report.build import build  # noqa: E402
from tests.shapes import SHAPES, lines_of, node_stats_done, submit, truths  # noqa: E402

REPORTSEFF = "reportseff==2.10.3"


def reportseff(work: Path) -> Path:
    """reportseff's command, in a venv of its own under `work`."""
    env = work / "reportseff-venv"
    venv.create(env, with_pip=True)
    subprocess.run([str(env / "bin" / "pip"), "install", "-q", REPORTSEFF], check=True)
    return env / "bin" / "reportseff"


def reportseff_figures(command: Path, ids: list[str]) -> dict[str, tuple[str, str]]:
    """reportseff's (MemEff, CPUEff) per job id, as it prints them."""
    out = subprocess.run([str(command), "--no-color", "--parsable", "--format",
                          "JobID,MemEff,CPUEff", *ids], capture_output=True, text=True,
                         check=True).stdout
    rows = [line.split("|") for line in out.splitlines()[1:] if line.strip()]
    return {r[0]: (r[1], r[2]) for r in rows if len(r) == 3}


def _report(ids: dict[str, str]) -> list[dict[str, Any]]:
    """`synergy report --format json`'s jobs, as a user runs it."""
    out = subprocess.run([str(ROOT / ".venv" / "bin" / "synergy"), "report", "--jobs",
                          ",".join(ids.values()), "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    return list(json.loads(out)["jobs"])


def _pct(share: float | None) -> float | None:
    return None if share is None else round(100 * share, 1)


def _cell(pct: float | None) -> str:
    return "-" if pct is None else f"{pct}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench" / "results" / "report_shapes.json")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF") or paths.on_local_cluster():
        LocalCluster(sync_every_s=0).up(log=lambda line: print(line, file=sys.stderr))
        # reportseff's sacct finds the local cluster as a user's shell would.
        os.environ["SLURM_CONF"] = str(paths.local_slurm_conf())
    slurm = Slurm()
    work = Path(tempfile.mkdtemp(prefix="bench-shapes-"))
    holder, ids = submit(slurm, work)
    command = reportseff(work)              # installed while the jobs run
    wait(slurm, list(ids.values()), timeout_s=900)
    lines = _report(ids)
    node_stats_done(paths.cluster_stats_dir(slurm.cluster_name()), lines)
    jobs = {j["job_id"]: j for j in _report(ids)}
    # The same jobs as a site without the node hooks would see them: sacct alone.
    alone = {j["job_id"]: j for j in output.records(
        build(slurm, list(ids.values()), stats_dir=work / "no-node-stats").jobs)}
    theirs = reportseff_figures(command, list(ids.values()))
    truth = truths(holder)
    rows = []
    for shape in SHAPES:
        for job in lines_of(list(jobs.values()), ids[shape.name]):
            mem, cpu = truth[job["job_id"]].percent(job["alloc_cpus"], job["elapsed_s"])
            rs_mem, rs_cpu = theirs.get(job["job_id"], ("", ""))
            sacct = alone[job["job_id"]]
            rows.append({
                "shape": shape.name, "job": job["job_id"], "truth_mem_pct": round(mem, 1),
                "synergy_mem_pct": _pct(job["mem_eff"]), "synergy_from": job["usage_from"],
                "synergy_peak_node": job["peak_node"],
                "sacct_mem_pct": _pct(sacct["mem_eff"]), "sacct_note": sacct["mem_note"],
                "sacct_estimated": sacct["mem_estimated"], "reportseff_mem": rs_mem,
                "truth_cpu_pct": round(cpu, 1), "synergy_cpu_pct": _pct(job["cpu_eff"]),
                "sacct_cpu_pct": _pct(sacct["cpu_eff"]), "reportseff_cpu": rs_cpu})
    result = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "reportseff": REPORTSEFF, "jobs": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("| shape | job | memory: truth | synergy | synergy, sacct alone | reportseff | "
          "CPU: truth | synergy | synergy, sacct alone | reportseff |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        sacct_mem = ("-" if r["sacct_mem_pct"] is None else
                     ("~" if r["sacct_estimated"] else "") + f"{r['sacct_mem_pct']}%")
        print(f"| {r['shape']} | {r['job']} | {r['truth_mem_pct']}% | "
              f"{_cell(r['synergy_mem_pct'])} | {sacct_mem} | {r['reportseff_mem'] or '-'} | "
              f"{r['truth_cpu_pct']}% | {_cell(r['synergy_cpu_pct'])} | "
              f"{_cell(r['sacct_cpu_pct'])} | {r['reportseff_cpu'] or '-'} |")
    print(args.out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
