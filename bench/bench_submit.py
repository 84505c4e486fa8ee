"""Benchmark the submission path on a 1,000-row job list, side by side in one run.

Measures rendering alone (a dry run), one sbatch per row, and job arrays, against the
cluster of SLURM_CONF or the local one (brought up if needed). Jobs are submitted
held and cancelled at once, so nothing runs. Figures go to bench/results/submit.json.

    make bench                     # or: .venv/bin/python bench/bench_submit.py --rows 1000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy import paths  # noqa: E402
from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402
from slurm_synergy.submission.submit import SubmitOptions, submit_csv  # noqa: E402


def job_list(folder: Path, rows: int) -> Path:
    script = folder / "noop.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    csv = folder / "sweep.csv"
    lines = ["name,script,cpus,gpus,mem,time,args"]
    lines += [f"sweep-{i},{script},1,1,100M,00:05:00,--seed {i}" for i in range(rows)]
    csv.write_text("\n".join(lines) + "\n")
    return csv


def timed(csv: Path, out: Path, slurm: Slurm, **flags) -> dict:
    start = time.perf_counter()
    result = submit_csv(csv, SubmitOptions(out=out, force=True, hold=True, **flags), slurm,
                        log=lambda line: None)
    seconds = time.perf_counter() - start
    jobs = sorted({job.split("_")[0] for job in result.job_ids.values()})
    slurm.cancel(jobs)
    rows = len(result.job_ids) or len(result.units)
    return {"rows": rows, "scripts": len(result.units), "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "submit.json")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF") or paths.on_local_cluster():
        LocalCluster(sync_every_s=0).up(log=lambda line: print(line, file=sys.stderr))
    slurm = Slurm()
    with tempfile.TemporaryDirectory(prefix="synergy-bench-") as tmp:
        tmp_path = Path(tmp)
        os.environ["SYNERGY_HOME"] = str(tmp_path / "home")  # keep the user's ledger clean
        csv = job_list(tmp_path, args.rows)
        figures = {
            "render_only": timed(csv, tmp_path / "dry", slurm, dry_run=True),
            "sbatch_per_row": timed(csv, tmp_path / "rows", slurm),
            "job_arrays": timed(csv, tmp_path / "arrays", slurm, arrays=True),
        }
    figures["arrays_speedup_over_per_row"] = round(
        figures["sbatch_per_row"]["seconds"] / figures["job_arrays"]["seconds"], 1)
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "host": platform.node(), "cpus": os.cpu_count(),
              "slurm": slurm.run(["sbatch", "--version"]).strip(), "figures": figures}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, fig in figures.items():
        print(f"{name:<28} {fig}")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
