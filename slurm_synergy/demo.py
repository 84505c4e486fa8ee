"""`make demo`: the local cluster up, and the plugin's whole flow on two workloads.

A CPU-hungry and a CPU-light workload, two runs of each, are submitted as a user writes
them (2 cores, 3 GB each). The first time, the shim marks them: the first job of each
workload is measured while it trains, to its end, and its decision right-sizes the
workload's second job in place while that one waits in the queue. Every later
submission is rewritten by the shim. The sacct table shows each kind of job.

Then an ordinary user (demo_user.py) submits a batch script of their own with plain
sbatch, twice: the first is measured while it trains, the cluster's sync timer compiles
its profile, and the second is right-sized at submission.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from slurm_synergy import paths
from slurm_synergy.cluster.commands import tail
from slurm_synergy.cluster.localbox import LocalCluster
from slurm_synergy.demo_user import DEMO_USER, plain_sbatch_twice
from slurm_synergy.jobs import job_table, records, wait
from slurm_synergy.chains import read_chains
from slurm_synergy.slurm import Slurm
from slurm_synergy.submission.submit import SubmitOptions, submit_csv

EXAMPLE = paths.JOBS_CSV / "rightsize.csv"


def run_demo(csv: Path = EXAMPLE, out: Path | None = None, user: str = DEMO_USER) -> int:
    """Run the demo on the local cluster (or SLURM_CONF's) and print what each job got;
    returns the exit status: 1 where a job failed (the ordinary user's too) or that user's
    second job was not right-sized."""
    out = out or paths.workspace() / "runs" / "demo"
    if os.environ.get("SLURM_CONF") and not paths.on_local_cluster():
        print(f"using the cluster of SLURM_CONF={os.environ['SLURM_CONF']}")
    else:
        # Unset, or naming the local cluster (as `cluster up` tells a user to export it):
        # the local cluster, up with its timers, and named from here on.
        LocalCluster().up()
    slurm = Slurm()
    # A demo is meant to run again each time, so the ledger does not hold it back.
    result = submit_csv(csv, SubmitOptions(out=out, force=True), slurm)
    ids = list(result.job_ids.values())
    print(f"submitted {len(ids)} jobs from {csv}: {', '.join(ids)}")
    wait(slurm, ids)
    # Where the site resubmits profiled jobs (on_profiled = "resubmit"): follow them.
    chain = {c.profiled_job: c.resubmitted_job for c in read_chains(slurm.cluster_name())
             if c.profiled_job in ids}
    if chain:
        print("profiled, then resubmitted: "
              + ", ".join(f"{old} -> {new}" for old, new in chain.items()))
        wait(slurm, list(chain.values()))
    recs = records(slurm, ids + list(chain.values()))
    print(job_table(recs))
    outputs = {t.spec.name: Path(t.output) for u in result.units for t in u.tasks}
    for name in result.job_ids:
        summary = outputs[name] / "summary.json"
        if summary.exists():
            s = json.loads(summary.read_text())
            print(f"{name}: {s['samples_per_s']:.1f} samples/s with {s['workers']} loader "
                  f"worker(s) on {s['device']}, data stall {s['data_stall_fraction']:.0%}")
    fps = sorted({t.spec.fingerprint for u in result.units for t in u.tasks})
    print("why these sizes: " + "; ".join(f"synergy plugin explain {fp}" for fp in fps))
    failed = [r for r in recs if r.state != "COMPLETED"]
    for r in failed:
        log = out / "logs" / f"{r.name}-{r.job_id}.out"
        print(f"\n{r.job_id} {r.name} ended {r.state}; last lines of {log}:\n{tail(log)}")
    print(f"\nscripts: {out / 'scripts'}\nlogs and training stats: {out}")
    print()
    # Not under `out`: the demo's outputs are root's alone (0700).
    user_ok = plain_sbatch_twice(slurm, user, paths.state_dir() / "users")
    return 1 if failed or not user_ok else 0
