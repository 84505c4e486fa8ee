"""What a stopped time-limit timer costs a job, on the local cluster's release
(SLURM_VERSION): a job whose prediction is a tenth of its real run gets its --time-min in
one round of root's timer, then the timer stops; backfill starts the job in a gap its
--time does not fit. On 22.05 Slurm lowers its limit to that time_min and, with no round
to give its --time back, ends it there (TIMEOUT); from 23.11 with time_min_as_soft_limit
its limit stays its --time and it runs to its end.

Writes DIR/timer_stopped-<release>.json; about three minutes.

    .venv/bin/python bench/bench_timer_stopped.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.decisions.timelimits import tick  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.model.runtime import TimeRule  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402
from slurm_synergy.slurm_release import major_minor  # noqa: E402
from tenant import sbatch, script, tenants  # noqa: E402

USER = "synergy-alice"
HISTORY_S, RUN_S = 8, 80


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    LocalCluster(sync_every_s=0).up(log=lambda line: None)
    slurm = Slurm()
    with tenants(slurm, (USER,), ROOT) as shared:
        nap = script(shared, "nap", shared.name, "$NAP")
        other = script(shared, "other", shared.name, "$NAP")
        ids: list[str] = []
        try:
            first = sbatch(USER, shared, nap, "--partition=gpu", "--time=20",
                           f"--export=ALL,NAP={HISTORY_S}")
            ids.append(first)
            wait(slurm, [first])
            # One of node1's two cores held, a two-core job waiting for it: a gap that
            # a one-core job fits only on its time_min.
            ids.append(sbatch(USER, shared, other, "--partition=gpu", "--time=3",
                              "--export=ALL,NAP=100"))
            ids.append(sbatch(USER, shared, other, "--partition=gpu", "--time=10",
                              "--cpus-per-task=2", "--export=ALL,NAP=1"))
            job = sbatch(USER, shared, nap, "--partition=gpu", "--time=20",
                         f"--export=ALL,NAP={RUN_S}")
            ids.append(job)
            said = tick(slurm, lambda: TimeRule(floor_min=1), shared / "root" / "limits.json",
                        None).line()
            # The timer stops here: no round gives a lowered limit back.
            deadline = time.monotonic() + 180
            while (started := slurm.timed_job(job)) and started.state == "PENDING":
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {job} never started ({said})")
                time.sleep(2)
            ended = wait(slurm, [job])[0]
        finally:
            slurm.cancel(ids)
    release = ".".join(map(str, major_minor(slurm.version()) or ()))
    result = {"slurm": slurm.version(), "round": said, "time_min_min": started.time_min_min,
              "limit_at_start_min": started.limit_min, "asked_min": 20, "run_s": RUN_S,
              "history_s": HISTORY_S, "state": ended.state, "elapsed": ended.elapsed,
              "at": time.strftime("%Y-%m-%d %H:%M")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"timer_stopped-{release}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
