"""One line of advice per thing a job could have asked for better, in the spirit of
Princeton's jobstats ("asked 64 GB, used 3 GB: --mem=6G is enough")."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

from slurm_synergy.report.accounting import row_dicts

HEADROOM = 1.25          # the policy's default mem_headroom, for a job without a profile
MIN_WASTE_MB = 1024      # below this, memory advice is noise
# A workload's --time is advised down where it is this many times its longest completed
# run, and at least this much longer, over at least TIME_JOBS completed jobs.
TIME_SLACK = 4.0
MIN_TIME_SLACK_S = 1800.0
TIME_JOBS = 2


def _mem_text(mb: float) -> str:
    return f"{mb / 1024:.0f}G" if mb >= 10 * 1024 else f"{math.ceil(mb)}M"


def for_job(j: Mapping[Any, Any]) -> list[str]:
    """What one job (a report row) could have asked for better."""
    out: list[str] = []
    state = j["state"] or ""
    if j["measured"]:
        out.append("measured while it trained: its workload's decision comes from this run")
    if j["sized_by"]:
        out.append(f"right-sized in place while it waited, by job {j['sized_by']}'s "
                   "measurement")
    if j["profiling"]:
        # Its size was chosen for the core sweep, not for training: nothing to advise.
        return [f"profiling run; resubmitted right-sized as {j['resubmitted_as']}"] \
            if j["resubmitted_as"] else []
    rss, mem = j["max_rss_mb"], j["node_mem_mb"]       # per node, as --mem asks
    lowered = j["decided_mem_mb"] is not None and (
        j["asked_mem_mb"] is None or j["decided_mem_mb"] < j["asked_mem_mb"])
    if j["rescued_lost_s"] is not None:
        size = (f"{j['decided_gpus']} GPU(s){' of ' + j['decided_gpu_type'] if j['decided_gpu_type'] else ''}"
                if j["rescued_of"] == "GPU memory" else _mem_text(j["decided_mem_mb"] or 0))
        out.append(f"ran out of {j['rescued_of']} at the decided {size} "
                   f"after {j['rescued_lost_s']:.0f} s; root put it back with what it asked, "
                   "and this is that run: its workload's next jobs ask as it did until a "
                   "run measures it again")
    if j["pace_pct"] is not None:
        out.append(f"trained at {j['pace_pct']:.0f}% of the rate its decision predicted for "
                   f"its {j['decided_cpus']} core(s), slower than the noise of both: its "
                   "workload's later jobs are decided more cores")
    if state == "OUT_OF_MEMORY" and lowered:
        out.append(f"ran out of memory at the decided {_mem_text(mem or 0)}: root's timer puts "
                   "it back with what it asked within a round, unless it was submitted with "
                   "--no-requeue (then resubmit it); its workload's next jobs ask as it did "
                   "until a run measures it again")
    elif state == "OUT_OF_MEMORY":
        out.append(f"ran out of memory at {_mem_text(mem or 0)}, the size it asked (not put "
                   "back: the plugin did not lower it): ask for more, or let the plugin "
                   "profile it (synergy submit --profile)")
    elif rss is not None and mem and state == "COMPLETED" and not j["mem_estimated"]:
        enough = max(rss * HEADROOM, 256)
        if mem - enough >= MIN_WASTE_MB and mem >= 2 * enough:
            where = "" if j["one_node"] else f" on its busiest node ({j['peak_node']})"
            out.append(f"asked {_mem_text(mem)}{' a node' if where else ''}, used "
                       f"{_mem_text(rss)}{where}: --mem={_mem_text(enough)} is enough")
    cpus, used = j["alloc_cpus"], j["total_cpu_s"]
    if j["narrow_step"]:
        # Its work had fewer cores than it paid for: fewer cores is not the advice.
        step, had = j["narrow_step"].split(":")
        out.append(f"its step {step} ran on {had} of the job's {cpus} cores (srun without -c "
                   f"in a job of several cores a task): the job paid for cores its training "
                   f"never had; `srun -c $SLURM_CPUS_PER_TASK`, or export "
                   f"SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK before srun")
    elif cpus and cpus > 1 and used is not None and j["elapsed_s"] and state == "COMPLETED" \
            and j["elapsed_s"] >= 60 and j["one_task"]:
        busy = used / j["elapsed_s"]
        if busy < 0.5 * cpus:
            out.append(f"kept {busy:.1f} of {cpus} cores busy: "
                       f"--cpus-per-task={max(1, math.ceil(busy))} is enough")
    util = j["gpu_util_pct"]
    if j["gpus"] and util is not None and util < 30:
        sm = j["gpu_sm_active_pct"]
        out.append(f"GPUs busy {util:.0f}% of the time" + (f" ({sm:.0f}% of SMs)" if sm is not None
                                                            else "") +
                   ": the data loader may be starving them (more cores or workers), or "
                   "fewer GPUs would do")
    asked, decided = j["asked_cpus"], j["decided_cpus"]
    if asked is not None and decided is not None and asked != decided \
            and j["rescued_lost_s"] is None:      # a job put back ran at what it asked
        out.append(f"the plugin gave it {decided} core(s) instead of the {asked} asked, "
                   f"from its profile")
    if j["time_min_s"] and j["elapsed_s"] and j["elapsed_s"] > j["time_min_s"]:
        stood = (f"root's timer gave its lowered limit back ({j['time_back_s'] / 60:.0f} "
                 "min, its --time) before it ran out" if j["time_back_s"]
                 else "its --time stood")
        out.append(f"ran {j['elapsed_s'] / 60:.1f} min, past its --time-min of "
                   f"{j['time_min_s'] / 60:.0f} min (predicted {j['predicted_s']:.0f} s): "
                   f"{stood}, and its workload's next prediction counts this run")
    if j["prop_elapsed_s"] and j["elapsed_s"] and j["prop_elapsed_s"] > 1.05 * j["elapsed_s"]:
        out.append(f"the GPU-proportional share ({j['prop_cpus']} core(s)) would have taken "
                   f"{j['prop_elapsed_s'] / j['elapsed_s']:.2f}x as long")
    return out


# What for_job reads: only these are turned into dicts (a report has thousands of rows).
_READS = ("job_id", "name", "state", "measured", "sized_by", "profiling", "resubmitted_as",
          "max_rss_mb", "node_mem_mb", "mem_estimated", "one_node", "peak_node", "alloc_cpus",
          "total_cpu_s", "elapsed_s", "one_task", "narrow_step", "gpus", "gpu_util_pct",
          "gpu_sm_active_pct",
          "asked_cpus", "decided_cpus", "prop_elapsed_s", "prop_cpus", "time_min_s",
          "predicted_s", "time_back_s", "limit_s", "fingerprint", "rescued_lost_s", "rescued_of",
          "pace_pct", "asked_mem_mb", "decided_mem_mb", "decided_gpus", "decided_gpu_type")


def for_workloads(jobs: Sequence[Mapping[Any, Any]]) -> list[dict[str, Any]]:
    """A line for each workload whose --time is many times its runs, on its last job."""
    groups: dict[str, list[Mapping[Any, Any]]] = {}
    for j in jobs:
        groups.setdefault(j["fingerprint"] or f"name:{j['name']}", []).append(j)
    out = []
    for group in groups.values():
        done = [j for j in group if j["state"] == "COMPLETED" and j["elapsed_s"]
                and j["limit_s"]]
        if len(done) < TIME_JOBS:
            continue
        longest, asked = max(j["elapsed_s"] for j in done), max(j["limit_s"] for j in done)
        if asked >= TIME_SLACK * longest and asked - longest >= MIN_TIME_SLACK_S:
            last = done[-1]
            out.append({"job_id": last["job_id"], "name": last["name"], "advice":
                        f"its workload's {len(done)} completed jobs ran at most "
                        f"{longest / 60:.1f} min of the {asked / 60:.0f} asked: "
                        f"--time={math.ceil(2 * longest / 60)} is enough (meanwhile "
                        "--time-min lets backfill start them sooner)"})
    return out


def lines(jobs: pd.DataFrame) -> list[dict[str, Any]]:
    """The report's advice: each job's lines (for_job), then the workloads' (for_workloads)."""
    rows = row_dicts(jobs[list(_READS)])
    return [{"job_id": j["job_id"], "name": j["name"], "advice": text}
            for j in rows for text in for_job(j)] + for_workloads(rows)
