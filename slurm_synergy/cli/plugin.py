"""`synergy plugin ...`: sync, timelimits, explain, install, chains, catalog, and the jobs'
own resubmit."""


from __future__ import annotations

import argparse
import os
from pathlib import Path
import sys
import time

from slurm_synergy import paths
from slurm_synergy.argtypes import positive_float
from slurm_synergy.columns import aligned
from slurm_synergy.hooks.trust import untrusted
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.profile import Profile
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.slurm import Slurm
from slurm_synergy.slurm_release import installable
from slurm_synergy.model.engine import Decision
from slurm_synergy.plugin.install import apply, plan_text
from slurm_synergy.model.policy import load_catalog
from slurm_synergy.paths import policy_path
from slurm_synergy.measure.errors import NOTHING_TO_GAIN_EXIT
from slurm_synergy.submission.resubmit import NothingToGain, resubmit
from slurm_synergy.chains import read_chains
from slurm_synergy.decisions.service import (DecisionRequest, DecisionService, Refusal,
                                              own_store)
from slurm_synergy.decisions.rescue import GpuEvidence, ledger_path, rescue_round
from slurm_synergy.decisions.rounds import keep_running, last_round_path, name_process
from slurm_synergy.decisions.sync import TIMER_NAME as SYNC_TIMER, keep_syncing, sync
from slurm_synergy.decisions.table import Owned, entries_of, read, table_path
from slurm_synergy.decisions.timelimits import (
    DEFAULT_STATE, TIMER_NAME as LIMITS_TIMER, explained, raise_left_s, rates_path, tick)
from slurm_synergy.model.policy import load_policy
from slurm_synergy.slurm import node_shape
from slurm_synergy.site import Site



def run(args: argparse.Namespace) -> int:
    """One plugin action. resubmit exits NOTHING_TO_GAIN_EXIT where submitting again gains
    nothing (the job script then trains in place)."""
    if args.action in ("sync", "timelimits", "install"):
        root_may_run()
    if args.action == "sync" and args.every:
        name_process(SYNC_TIMER)
        keep_syncing(args.every, args.table, args.partition,
                     log=lambda line: print(line, flush=True))
    elif args.action == "sync":
        print(sync(path=args.table, partition=args.partition))
    elif args.action == "timelimits":
        slurm = Slurm()
        table = args.table or table_path()
        rates, ledger = rates_path(table), ledger_path(table)

        def one_round() -> tuple[str, bool]:
            """A round of root's timer, in its line, and whether it looked at everything:
            jobs that ran out of memory or GPU memory at the decided size put back first
            (slurmctld holds them only minutes), then limits."""
            ok = True
            try:
                gpus = GpuEvidence.of_cluster(slurm.config().get("ClusterName", ""))
                rescued = rescue_round(slurm, ledger, gpus).line()
            except SynergyError as e:
                rescued, ok = f"jobs out of memory not looked at: {e}", False
            limits = tick(slurm, lambda: load_policy(policy_path()).time_rule, args.state,
                          rates, raise_left_s(args.every or 0))
            line = "; ".join(part for part in (rescued, limits.line()) if part)
            return line, ok and not limits.faults
        if args.every:
            name_process(LIMITS_TIMER)
            keep_running(one_round, args.every, log=lambda line: print(line, flush=True),
                         record=last_round_path(table, LIMITS_TIMER))
        else:
            print(one_round()[0])
    elif args.action == "explain":
        print(explain(args.fingerprint, args.partition, args.qos))
    elif args.action == "install":
        conf = args.conf or paths.slurm_conf_file()
        release = Slurm(conf).version()
        print(release_check(release, args))
        print("\n".join(apply(conf, release)) if args.apply else plan_text(conf, release))
    elif args.action == "chains":
        print(chains())
    elif args.action == "catalog":
        print(catalog(args.partition))
    else:
        try:
            resubmit(args.job, args.script, args.comment, args.job_name, args.array_task,
                     args.mode, log=lambda line: print(line, file=sys.stderr),
                     gpu_move=args.gpu_move)
        except NothingToGain as e:
            print(f"slurm-synergy: not resubmitted: {e}", file=sys.stderr)
            return NOTHING_TO_GAIN_EXIT
    return 0


def root_may_run() -> None:
    """Root runs sync (from cron) and install: SynergyError where a user other than root
    could change the interpreter, the package or the policy it would run or read, which
    would give that user root, or let them write the decision table slurmctld reads."""
    if os.geteuid() != 0:
        return
    found = untrusted(Path(sys.executable), policy_path())
    if found:
        raise SynergyError("not run as root: another user could change what it runs or "
                           "reads (install it where root alone can write, "
                           "docs/install.md):\n  " + "\n  ".join(found[:10]))


def describe(d: Decision) -> str:
    """A decision in a line: cores, MB, GPUs, loader workers, power limit."""
    power = f"{d.power_limit_w} W" if d.power_limit_w else "the site cap / device default"
    return (f"{d.cpus} core(s), {d.mem_mb} MB, {d.gres or 'no GPU'}, {d.workers} loader "
            f"worker(s), power limit {power}")


def measuring_cost(profile: Profile, resubmitted_as: str | None) -> str:
    """What measuring the workload cost its user: training lost to the sweep's windows,
    or a profiling prolog and, where the job was then submitted again, a second wait."""
    job = profile.allocation.job_id or "?"
    if profile.allocation.launcher == "in-run":
        return (f"measured while job {job} trained: {profile.profiling_s:.0f} s of training "
                "at fewer cores; no second queue wait")
    spent = f"profiled in {profile.profiling_s:.0f} s of job {job}'s allocation"
    if resubmitted_as:
        return (f"{spent}, then submitted again as job {resubmitted_as} (on_profiled = "
                "resubmit): a second queue wait, with its priority age started again")
    return f"{spent}; no second queue wait"


def explain(fingerprint: str, partition: str | None = None, qos: str = "") -> str:
    """A workload's decision for the partition's nodes and the caller's limits, every
    reason for it, what measuring it cost, and whether the decision table holds it."""
    store = ProfileStore.default()
    profile = store.load(fingerprint)
    service = DecisionService.for_site(Site.load(), own_store(store))
    d = service.judge(DecisionRequest(os.geteuid(), fingerprint, partition or "", qos),
                      profile)
    if isinstance(d, Refusal):
        reasons = d.reasons if d.reasons and d.reasons[-1] == d.why else (*d.reasons, d.why)
        return "\n".join([f"workload {fingerprint} ({profile.job_name or 'unnamed'})",
                          "decision: none; its jobs run as asked", f"policy: {policy_path()}",
                          "why:", *(f"  - {r}" for r in reasons)])
    lines = [f"workload {fingerprint} ({profile.job_name or 'unnamed'})",
             f"decision: {describe(d)}",
             f"  predicted {d.predicted_samples_per_s:.1f} samples/s, best within the cap "
             f"{d.best_samples_per_s:.1f}; GPU-proportional share {d.share_cpus} core(s), "
             f"{d.share_mem_mb} MB",
             f"policy: {policy_path()}", "why:"]
    lines += [f"  - {r}" for r in d.reasons]
    again = next((c.resubmitted_job for c in read_chains(Slurm().cluster_name())
                  if c.fingerprint == fingerprint
                  and c.profiled_job == profile.allocation.job_id), None)
    lines.append(f"cost: {measuring_cost(profile, again)}")
    try:
        lines.append(explained(service.slurm, Owned(os.geteuid(), d),
                               service.policy.time_rule))
    except SynergyError as e:
        lines.append(f"run time: not predicted: {e}")
    path = table_path()
    try:
        entries = entries_of(read(path)[1])
    except SynergyError as e:
        lines.append(f"decision table: {e}")
    else:
        entry = entries.get(fingerprint)
        if entry is None:
            lines.append(f"decision table {path}: no entry yet (synergy plugin sync)")
        elif (entry.cpus, entry.mem_mb, entry.gpus, entry.gpu_type, entry.workers,
              entry.power_limit_w) == (d.cpus, d.mem_mb, d.gpus, d.gpu_type, d.workers,
                                       d.power_limit_w):
            lines.append(f"decision table {path}: the shim applies this decision")
        else:
            lines.append(f"decision table {path}: holds an older decision ({entry.cpus} cores, "
                         f"{entry.mem_mb} MB, {entry.gpus} GPUs); synergy plugin sync updates it")
    return "\n".join(lines)


def catalog(partition: str | None = None) -> str:
    """The site's GPU catalog, checked, beside the GPU types the partition has.
    SynergyError (exit 1) when the catalog cannot be used."""
    path = policy_path()
    types = load_catalog(path)
    rows = [(t.name, str(t.memory_mib), f"{t.min_power_w:g}/{t.default_power_w:g}/"
             f"{t.max_power_w:g}", f"{t.idle_w:g}", f"{t.speed:g}") for t in types.values()]
    lines = [f"GPU catalog in {path}: {len(types)} type(s)"]
    if rows:
        lines.append(aligned(("Type", "MiB", "Power min/default/max W", "Idle W", "Speed"),
                             rows))
    try:
        present = node_shape(Slurm(), partition).gpu_types
    except SynergyError as e:
        lines.append(f"the partition's GPU types are unknown: {e}")
    else:
        missing = [t for t in present if t not in types]
        lines.append(f"partition GPU types: {', '.join(present) or 'none (untyped GPUs)'}"
                     + (f"; not in the catalog (jobs on them keep their gres): "
                        f"{', '.join(missing)}" if missing else ""))
    return "\n".join(lines)


def chains() -> str:
    """This cluster's jobs submitted again after profiling, as a table."""
    links = read_chains(Slurm().cluster_name())
    if not links:
        return "no job has been resubmitted after profiling yet"
    return aligned(("Profiled", "Resubmitted", "Name", "Fingerprint", "Mode", "At"),
                   [(c.profiled_job, c.resubmitted_job, c.job_name, c.fingerprint, c.mode,
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c.at)))
                    for c in links])


def release_check(line: str, args: argparse.Namespace) -> str:
    """The cluster's Slurm release (its scontrol --version `line`): a line for one the
    product is tested on; SynergyError for another where --apply would install without
    --force."""
    return installable(line, force=args.force or not args.apply)


def install_options(a: argparse.ArgumentParser) -> None:
    """--apply, --force and --conf, shared with `hooks install`."""
    a.add_argument("--apply", action="store_true", help="make the changes, not just print them")
    a.add_argument("--force", action="store_true", help="install into a Slurm release it "
                   "was not tested on (docs/install.md lists the tested ones)")
    a.add_argument("--conf", type=Path, help="the cluster's slurm.conf (default: SLURM_CONF, "
                   "else the local cluster's)")


def add_parser(sub) -> None:
    """`plugin sync|timelimits|explain|install|chains|catalog|resubmit`."""
    p = sub.add_parser("plugin", help="the decision engine and the job_submit shim")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("sync", help="compile the decision table from the profile store")
    a.add_argument("--table", type=Path, help="where (default: beside slurm.conf)")
    a.add_argument("--partition", help="size decisions for this partition (default: the "
                   "default partition)")
    a.add_argument("--every", type=positive_float, metavar="SECONDS",
                   help="sync again every SECONDS, until stopped (a site's cron as one "
                   "process; the local cluster's timer)")
    a = actions.add_parser("timelimits", help="set pending jobs' --time-min from their "
                           "workloads' completed jobs, and put limits Slurm lowered back "
                           "before they end a job; put a job that ran out of memory at the "
                           "decided size back with what it asked (root or a Slurm operator; "
                           "docs/time-limits.md, docs/rescue.md)")
    a.add_argument("--every", type=positive_float, metavar="SECONDS",
                   help="a round every SECONDS, until stopped (default: one round, as a "
                   "site's cron runs it every minute)")
    a.add_argument("--state", type=Path, default=DEFAULT_STATE,
                   help=f"root's record of the jobs it set (default: {DEFAULT_STATE})")
    a.add_argument("--table", type=Path, help="the decision table, beside which sync "
                   "leaves the decisions' rates (default: beside slurm.conf)")
    a = actions.add_parser("explain", help="a workload's decision and every reason for it")
    a.add_argument("fingerprint", help="16 hex digits, as in the job comment synergy:fp=...")
    a.add_argument("--partition", help="as for sync")
    a.add_argument("--qos", default="", help="held to this QOS's limits (default: the one "
                   "your jobs get without --qos)")
    a = actions.add_parser("install", help="the slurm.conf lines and files the shim needs")
    install_options(a)
    a = actions.add_parser("chains", help="profiling jobs and the jobs they resubmitted")
    a = actions.add_parser("catalog", help="the site's GPU catalog, checked, beside the "
                           "partition's GPU types")
    a.add_argument("--partition", help="as for sync")
    a = actions.add_parser("resubmit", help="(run by a job after profiling) submit it again")
    a.add_argument("--job", required=True)
    a.add_argument("--script", type=Path, required=True)
    a.add_argument("--comment", required=True)
    a.add_argument("--job-name", default="")
    a.add_argument("--array-task", default="")
    a.add_argument("--mode", choices=("auto", "shim", "user"), default="auto")
    a.add_argument("--gpu-move", type=Path, help="the profiler's record that the job's GPU "
                   "would not hold its step: submit it on the type named there, to profile")
    p.set_defaults(func=run)
