"""`make demo`: the local cluster up, the example job list in, a sacct table out."""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import paths
from .cluster.localbox import LocalCluster, tail
from .jobs import records, table, wait
from .slurm import Slurm
from .submit import SubmitOptions, submit_csv

EXAMPLE = paths.JOBS_CSV / "example.csv"


def run_demo(csv: Path = EXAMPLE, out: Path | None = None) -> int:
    out = out or paths.ROOT / "runs" / "demo"
    if os.environ.get("SLURM_CONF"):
        print(f"using the cluster of SLURM_CONF={os.environ['SLURM_CONF']}")
    else:
        LocalCluster().up()
    slurm = Slurm()
    # A demo is meant to run again each time, so the ledger does not hold it back.
    result = submit_csv(csv, SubmitOptions(out=out, force=True), slurm)
    ids = list(result.job_ids.values())
    print(f"submitted {len(ids)} jobs from {csv}: {', '.join(ids)}")
    wait(slurm, ids)
    recs = records(slurm, ids)
    print(table(recs))
    outputs = {t.spec.name: Path(t.output) for u in result.units for t in u.tasks}
    for r in recs:
        summary = outputs[r.name] / "summary.json"
        if summary.exists():
            s = json.loads(summary.read_text())
            print(f"{r.name}: {s['samples_per_s']:.1f} samples/s on {s['device']}, "
                  f"data stall {s['data_stall_fraction']:.0%}")
    failed = [r for r in recs if r.state != "COMPLETED"]
    for r in failed:
        log = out / "logs" / f"{r.name}-{r.job_id}.out"
        print(f"\n{r.job_id} {r.name} ended {r.state}; last lines of {log}:\n{tail(log)}")
    print(f"\nscripts: {out / 'scripts'}\nlogs and training stats: {out}")
    return 1 if failed else 0
