"""A running job's memory, followed to its end beside it.

A workload's peak can come long after the first seconds that a profile sees: a heap that
grows over epochs, a validation pass, a batch of longer samples. Every job of a measured
workload that runs under the in-run wrapper (the measured one after its sweep, its
siblings, later submissions) is followed: its process tree's memory is read every
MEMORY_LOOK_S (its proportional share every PSS_LOOK_S), and a peak above its workload's
profile raises the profile, so that the decision, and this user's jobs of the workload
still pending, cover it. Only ever up: a job that used less says nothing about the next.
A later run whose program (probe/cmdfiles.py: a config, the script, the code beside it)
reads another content than the measured run's did sets the profile aside: the decision
was measured on another program, so this user's pending jobs of the workload that it
right-sized ask again for what they were submitted with, and the next to run is measured.
A run right-sized to fewer cores than it asked is also timed (pace.py): one slower than its
decision predicted by more than their noise counts the workload slower at those cores, so
its later jobs are decided more.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.profile_read import profile_from_json
from slurm_synergy.model.profile import MemoryRaise, Profile, ProfileError, SlowRun
from slurm_synergy.decisions.pending import rightsize_pending, undo_pending
from slurm_synergy.decisions.rescue import MARK as RESCUED
from slurm_synergy.probe import cmdfiles
from slurm_synergy.probe.supervise import Started
from slurm_synergy.probe.records import read_records
from slurm_synergy.probe.tree import ProcessTree
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.measure.lock import sync_decisions
from slurm_synergy.measure.inrun.pace import Pace, predicted_at, slower
from slurm_synergy.measure.inrun.windows import PSS_LOOK_S
from slurm_synergy.decisions.service import (DecisionRequest, DecisionService, Refusal,
                                              own_store)
from slurm_synergy.site import Site

PROG = "inrun"              # the in-run wrapper's lines in the job's log
MEMORY_LOOK_S = 2.0         # the job's memory read this often to its end


class Follow:
    """Beside a job of a measured workload (the measured one too, after its sweep): its
    memory to its end. A peak above its workload's profile raises the profile, and so the
    decision and this user's jobs of the workload still pending. A run whose program is
    not what the profile's run read drops the profile (probe/cmdfiles.py). A run given
    fewer cores than it asked (`cut`: its comment's decision=, which did) is timed too."""

    def __init__(self, fingerprint: str, site: Site, store: ProfileStore, job_id: str,
                 log: Callable[[str], None], measured: cmdfiles.Seen | None = None,
                 cut: comment_format.Resources | None = None) -> None:
        self.fingerprint, self.site, self.store = fingerprint, site, store
        self.policy, self.slurm = site.policy, site.slurm
        self.job_id, self.log = job_id, log
        self.measured = measured    # the measured run's files: what it writes is left out
        self.cut = cut
        self.dropped = False
        self.folder: Path | None = None
        self.pace = Pace()

    def during(self, proc: Started, folder: Path) -> None:
        """The watched run's program compared with its profile's, then its memory (and,
        where it was given fewer cores, its pace) to its end."""
        self.folder = folder if self.cut is not None else None
        self.same_program(proc.pid)
        self.until_it_ends(ProcessTree(proc.pid, pss_every_s=PSS_LOOK_S), proc)

    def same_program(self, pid: int) -> None:
        """Where this run reads another content from a file its workload's measured run
        read (a config edited under the same batch script), the profile is set aside and
        the decision table compiled without it: the workload's next job is measured."""
        try:
            profile = self.store.load(self.fingerprint)
        except (OSError, ProfileError):
            return
        seen = cmdfiles.of_process(pid) if profile.command_files else None
        differ = cmdfiles.changed(profile.command_files, seen.read) if seen else []
        if not differ:
            return
        try:
            self.store.retire(self.fingerprint)
        except OSError as e:
            self.log(f"{PROG}: {self.fingerprint}: the profile could not be set aside ({e}); "
                     "its decision stays")
            return
        self.dropped = True
        self.log(f"{PROG}: {self.fingerprint}: job {self.job_id or '-'} reads "
                 f"{', '.join(differ)} other than its profile's run (job "
                 f"{profile.allocation.job_id or '-'}) did: its memory and cores were "
                 "decided for what that run read; the decision is dropped, and the "
                 "workload's next job is measured (a job out of memory meanwhile is put "
                 "back with what it asked)")
        sync_decisions(self.log, PROG, self.site)
        # Jobs the old decision right-sized would otherwise run the new program with it.
        try:
            undo_pending(self.fingerprint, self.job_id, self.slurm, self.log)
        except SynergyError as e:
            self.log(f"{PROG}: pending jobs of {self.fingerprint} keep the dropped decision: "
                     f"{e}")

    def until_it_ends(self, tree: ProcessTree, proc: Started) -> None:
        """Read the tree's memory until the job ends; a peak above its profile raises the profile
        and the decisions (the looks of its last moments not counted)."""
        while True:
            kept = tree.peaks()
            tree.look()
            if self.folder is not None:
                self.pace.look(read_records(self.folder))
            try:        # the job's end is not held up by the wait between looks
                proc.wait(timeout=MEMORY_LOOK_S)
            except subprocess.TimeoutExpired:
                continue
            # The job ended within a look of this one, which may have read its processes
            # being torn down: they can read hundreds of MB more than they hold (a
            # trainer's own memory read at 852 MB at an instant its cgroup was charged
            # 65 MB; docs/profiling.md, memory over a whole run). Not counted.
            tree.restore(kept)
            break
        if self.dropped:
            return
        try:
            profile = self.store.load(self.fingerprint)
        except (OSError, ProfileError) as e:
            self.log(f"{PROG}: job {self.job_id}'s memory peak not compared with its "
                     f"workload's profile: {e}")
            return
        updated = profile
        if self.measured is not None:
            # What the measured run wrote after its profile was saved is its output.
            unchanged = set(self.measured.unchanged())
            updated = replace(profile, command_files=tuple(
                f for f in profile.command_files if f in unchanged))
        seen = profile.model.footprint_mb
        # Within half the noise allowed for, the decision holds it already.
        grew = tree.footprint_mb > seen * (1 + self.policy.min_mem_spread / 2)
        if grew:
            updated = with_peak(updated, tree, self.job_id)
        slow = self.slower(updated)
        if slow is not None:
            updated = replace(updated, slowed=(*updated.slowed, slow))
        if updated != profile:
            self.store.save(updated)
        if grew:
            self.log(f"{PROG}: {self.fingerprint}: job {self.job_id or '-'}'s memory peaked "
                     f"at {tree.footprint_mb:.0f} MB, above its profile's {seen:.0f} MB; "
                     "profile and decisions updated")
        if slow is not None:
            self.log(f"{PROG}: {self.fingerprint}: job {self.job_id or '-'} trained at "
                     f"{slow.observed:.1f} {profile.rate_unit} (±{slow.spread:.0%} over its "
                     f"run) on its decided {slow.cores} core(s), where its decision predicted "
                     f"{slow.predicted:.1f}: slower by more than their noise. The workload "
                     f"is counted {1 - slow.factor:.0%} slower at {slow.cores} core(s) and "
                     "fewer, and its later jobs are decided anew")
            self.mark_pace(slow)
        if grew or slow is not None:
            self.apply(updated)

    def mark_pace(self, slow: SlowRun) -> None:
        """pace=<percent> in this job's comment, for `synergy jobs` and the reports."""
        if not self.job_id:
            return
        try:
            self.slurm.mark(self.job_id, comment_format.Marks(
                {"pace": str(round(100 * slow.factor))}))
        except SynergyError as e:
            self.log(f"{PROG}: job {self.job_id}'s comment not marked: {e}")

    def slower(self, profile: Profile) -> SlowRun | None:
        """This run as a SlowRun where it was given fewer cores than it asked and trained
        slower than its decision predicted by more than their noise; else None."""
        cut = self.cut
        run = self.pace.rate() if cut is not None else None
        if cut is None or not cut.cpus or run is None:
            return None
        predicted, noise = predicted_at(profile, cut.cpus,
                                        cut.mem_mb or profile.allocation.mem_mb,
                                        self.policy.min_spread)
        slow = slower(predicted, noise, cut.cpus, run, self.job_id,
                      datetime.now(timezone.utc).isoformat(timespec="seconds"))
        if slow is None:
            self.log(f"{PROG}: {self.fingerprint}: job {self.job_id or '-'} trained at "
                     f"{run.rate:.1f} {profile.rate_unit} (±{run.spread:.0%} over {run.spans} "
                     f"spans) on its decided {cut.cpus} core(s); its decision predicted "
                     f"{predicted:.1f} (±{noise:.0%}): within their noise")
        return slow

    def apply(self, profile: Profile) -> None:
        """The table compiled, then this user's pending jobs right-sized in place; where
        Slurm cannot be asked (slurmctld down), one line says so and the job goes on."""
        sync_decisions(self.log, PROG, self.site)
        try:
            self._rightsize(profile)
        except SynergyError as e:
            self.log(f"{PROG}: pending jobs of {profile.fingerprint} not right-sized: {e}")

    def _rightsize(self, profile: Profile) -> None:
        # Through the strict reader, as the table's sync reads it from the store: a profile
        # it would refuse right-sizes nothing here either.
        profile = profile_from_json(profile.to_json(), f"{profile.fingerprint} (this run's)")
        service = DecisionService.for_site(self.site, own_store(self.store))
        partition = os.environ.get("SLURM_JOB_PARTITION", "")
        # Decided from the profile this run holds, not read back from the store.
        decision = service.judge(DecisionRequest(os.geteuid(), profile.fingerprint,
                                                 partition), profile)
        if isinstance(decision, Refusal):
            self.log(f"{PROG}: no decision for {profile.fingerprint}: {decision.why}")
            return
        self.log(f"{PROG}: decision for {profile.fingerprint}: {decision.summary()}")
        done = rightsize_pending(profile.fingerprint, self.job_id, service, self.log,
                                 profile)
        if done.updated:
            self.log(f"{PROG}: right-sized in place: " + ", ".join(
                f"job {j} -> {r.decided}" for j, r in done.updated))


def cut_cores(comment: str) -> comment_format.Resources | None:
    """The comment's decision where it gave the job fewer cores than it asked (the risk
    the product took with its pace); else None."""
    decided, asked = comment_format.decision(comment), comment_format.asked(comment)
    if RESCUED in comment_format.marks(comment):
        return None         # put back with what it asked: it runs at its own size
    if decided is None or asked is None or not decided.cpus or not asked.cpus:
        return None
    return decided if decided.cpus < asked.cpus else None


def tree_memory(tree: ProcessTree) -> dict[str, Any]:
    """A point's memory fields from the job's process tree: every point of an in-run
    profile shares the whole run's peak."""
    m = tree.memory()
    return {"peak_rss_mb": m.rss_mb, "peaks_mb": (m.footprint_mb,), "peak_pss_mb": m.pss_mb,
            "peak_own_mb": m.own_mb, "anon_mb": m.anon_mb}


def with_peak(profile: Profile, tree: ProcessTree, job_id: str) -> Profile:
    """The profile with job `job_id`'s higher peak, the raise on its record."""
    points = tuple(replace(p, **tree_memory(tree)) for p in profile.points)
    m = tree.memory()
    raised = MemoryRaise(job_id or "-", round(profile.model.footprint_mb, 1),
                         round(m.footprint_mb, 1),
                         datetime.now(timezone.utc).isoformat(timespec="seconds"))
    return replace(profile, points=points, raised=(*profile.raised, raised), model=replace(
        profile.model, footprint_mb=m.footprint_mb, anon_mb=m.anon_mb))
