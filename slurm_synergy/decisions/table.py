"""The decision table: every profiled workload's decision, in the form job_submit.lua reads.

slurmctld runs the Lua shim on every submission, so the table is plain lines that Lua
matches with one pattern each, and its first line carries a generation (a hash of the
rest) and what the partition's nodes have; the shim reads it again whenever the file's
inode, size or times change.

    synergy-decisions 3 gen=<hash> partition=gpu user_wins=0 profile_new=1 max_cpus=64
        max_mem_mb=515000 max_gpus=8 gpu_types=a100,h100 plain=1 skip_partitions=debug
        skip_accounts= skip_uids=1003 entries=2                         (one line)
    <uid> <fingerprint> <cpus> <mem_mb> <gpus> <gpu_type or -> <workers>
        <power_limit_w or 0> <training processes per task>

An entry is the decision from one user's profile, and the shim applies it to that
submitting uid's jobs alone: a profile one user writes never sizes another user's job,
unless the site names a group whose members share decisions (policy share_group): then
a member's decision is also an entry for each other member without one of their own.

Decisions are sized for one partition's nodes (the default one unless told): the header
holds what its smallest node has (from sinfo), no entry goes beyond it, and the shim
leaves jobs that will run in another partition alone. The table lives beside slurm.conf (where
slurmctld finds job_submit.lua), is written whole (temporary file + rename), readable by
all and writable only by its owner. Compiling it reads files users wrote, so every
profile is read as untrusted (profiles.py), a bad one is left out and named, and the
numbers are capped: per user, in all, and in time.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from slurm_synergy import paths
from slurm_synergy.slurm import node_shape
from slurm_synergy.model.comment import FINGERPRINT
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.fileio import atomic_write_text, locked
from slurm_synergy.model.profile import ProfileError
from slurm_synergy.profiles import ProfileStore, stores_to_compile
from slurm_synergy.slurm import JobLimit, Slurm
from slurm_synergy.model.engine import Decision, NodeShape, decide
from slurm_synergy.model.gpus import Catalog
from slurm_synergy.model.policy import Policy, load_site, site_catalog
from slurm_synergy.paths import policy_path

TABLE_NAME = "synergy-decisions.tbl"
MAGIC = "synergy-decisions"
FORMAT = 3
# Hard bounds the shim also enforces, whatever the header says.
MAX_CPUS = 65536
MAX_MEM_MB = 64 * 1024 * 1024
MAX_GPUS = 64
# The shim refuses a table of more entries (job_submit.lua's MAX_ENTRIES): a user past
# their cap, or a table past the total, loses the rest, never the whole table.
MAX_PER_USER = 2000
MAX_ENTRIES = 200000
SYNC_BUDGET_S = 120.0
SHOWN_SKIPPED = 20           # a flood of bad files is counted, not listed
ENTRY_RE = re.compile(rf"^(\d{{1,10}}) ({FINGERPRINT}) (\d+) (\d+) (\d+) ([A-Za-z0-9_.-]{{1,32}}) "
                      r"(\d+) (\d+) (\d+)$")
Owned = tuple[int, Decision]        # a decision and the uid whose jobs it sizes


@dataclass(frozen=True)
class TableEntry:
    """One line of the table: what the shim applies to a job of this fingerprint that
    this uid submits."""

    uid: int
    fingerprint: str
    cpus: int
    mem_mb: int
    gpus: int
    gpu_type: str
    workers: int
    power_limit_w: int
    procs: int = 1      # training processes per task: workers follow pinned cores by it


def table_path() -> Path:
    """SYNERGY_DECISIONS, else beside the slurm.conf in use (where job_submit.lua is)."""
    if os.environ.get("SYNERGY_DECISIONS"):
        return Path(os.environ["SYNERGY_DECISIONS"])
    conf = paths.slurm_conf() or Path("/etc/slurm/slurm.conf")
    return conf.parent / TABLE_NAME


def render(decisions: Sequence[Owned], policy: Policy, shape: NodeShape,
           partition: str = "") -> str:
    body = "".join(f"{uid} {d.fingerprint} {d.cpus} {d.mem_mb} {d.gpus} {d.gpu_type or '-'} "
                   f"{d.workers} {d.power_limit_w} {d.procs}\n"
                   for uid, d in sorted(decisions, key=lambda o: (o[0], o[1].fingerprint)))
    gen = hashlib.sha256(body.encode()).hexdigest()[:12]
    head = (f"{MAGIC} {FORMAT} gen={gen} partition={partition} "
            f"user_wins={int(policy.user_request_wins)} "
            f"profile_new={int(policy.profile_new)} max_cpus={min(shape.cores, MAX_CPUS)} "
            f"max_mem_mb={min(shape.mem_mb, MAX_MEM_MB)} max_gpus={min(shape.gpus, MAX_GPUS)} "
            f"gpu_types={','.join(shape.gpu_types)} plain={int(policy.plain_scripts)} "
            f"skip_partitions={','.join(policy.skip_partitions)} "
            f"skip_accounts={','.join(policy.skip_accounts)} "
            f"skip_uids={','.join(str(u) for u in uids_of(policy.skip_users))} "
            f"entries={len(decisions)}\n")
    return head + body


def uids_of(names: Sequence[str]) -> list[int]:
    """The uids of the named users this host knows, in order (the shim sees uids)."""
    out = []
    for name in names:
        try:
            out.append(pwd.getpwnam(name).pw_uid)
        except KeyError:
            continue        # no such user here: nothing of theirs to skip
    return out


def read(path: Path) -> tuple[dict[str, str], dict[tuple[int, str], TableEntry]]:
    """The header's fields and the entries by (uid, fingerprint); SynergyError naming the
    line if malformed."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SynergyError(f"cannot read the decision table {path}: {e}") from None
    if not lines or not lines[0].startswith(f"{MAGIC} {FORMAT} "):
        raise SynergyError(f"{path} is not a version {FORMAT} decision table")
    header = dict(word.split("=", 1) for word in lines[0].split()[2:] if "=" in word)
    entries = {}
    for number, line in enumerate(lines[1:], start=2):
        m = ENTRY_RE.match(line)
        if not m:
            raise SynergyError(f"{path} line {number} is malformed: {line[:80]!r}")
        uid, fp, cpus, mem, gpus, gtype, workers, power, procs = m.groups()
        entries[int(uid), fp] = TableEntry(int(uid), fp, int(cpus), int(mem), int(gpus),
                                           "" if gtype == "-" else gtype, int(workers),
                                           int(power), int(procs))
    return header, entries


def entries_of(entries: dict[tuple[int, str], TableEntry],
               uid: int | None = None) -> dict[str, TableEntry]:
    """The entries that size the jobs `uid` (the caller) submits, by fingerprint."""
    uid = os.geteuid() if uid is None else uid
    return {fp: e for (owner, fp), e in entries.items() if owner == uid}


def compile_decisions(stores: Sequence[ProfileStore], shape: NodeShape, policy: Policy,
                      catalog: Catalog | None = None, budget_s: float = SYNC_BUDGET_S,
                      limits: Mapping[int, JobLimit] | None = None
                      ) -> tuple[list[Owned], list[str]]:
    """A decision per usable profile, for the uid whose store holds it; a profile that
    cannot be read or decided from is left out (its jobs are profiled again) and named in
    the second list, as are a decision past its user's per-job limit (`limits`, by uid:
    Slurm would hold the job for ever), a user's profiles past MAX_PER_USER, the table's
    past MAX_ENTRIES, and whatever was not reached within `budget_s`."""
    limits = limits or {}
    decisions: list[Owned] = []
    skipped: list[str] = []
    deadline = time.monotonic() + budget_s
    for store in stores:
        fps = store.fingerprints()
        room = min(MAX_PER_USER, MAX_ENTRIES - len(decisions))
        if len(fps) > room:
            skipped.append(f"{store.root}: {len(fps) - room} profile(s) past the cap "
                           f"({MAX_PER_USER} a user, {MAX_ENTRIES} in all) left out")
            fps = fps[:room]
        for n, fp in enumerate(fps):
            if time.monotonic() > deadline:
                skipped.append(f"{store.root}: {len(fps) - n} profile(s) not reached "
                               f"within the sync's {budget_s:.0f} s")
                break
            try:
                decision = decide(store.load(fp), shape, policy, catalog)
            except (ProfileError, ValueError, ArithmeticError) as e:
                skipped.append(f"{fp}: {e}")
                continue
            beyond = beyond_shape(decision, shape) or \
                beyond_limit(decision, limits.get(store.owner, JobLimit()))
            if beyond:
                skipped.append(f"{fp}: {beyond}")
            else:
                decisions.append((store.owner, decision))
    if policy.share_group:
        try:
            decisions = shared(decisions, group_members(policy.share_group), limits)
        except KeyError:
            skipped.append(f"share_group {policy.share_group!r}: no such group, so no "
                           "decision is shared")
    skipped += [f"skip_users {name!r}: no such user on this host, so no job is skipped for "
                "that name" for name in policy.skip_users if not uids_of([name])]
    return decisions, skipped


def group_members(name: str) -> set[int]:
    """The uids of a Unix group: its listed members and the users whose primary group it
    is. KeyError if there is no such group."""
    group = grp.getgrnam(name)
    uids = {p.pw_uid for p in pwd.getpwall() if p.pw_gid == group.gr_gid}
    for member in group.gr_mem:
        try:
            uids.add(pwd.getpwnam(member).pw_uid)
        except KeyError:
            continue        # a listed name with no account shares nothing
    return uids


def shared(decisions: Sequence[Owned], members: set[int],
           limits: Mapping[int, JobLimit] | None = None) -> list[Owned]:
    """Each member's decisions also for every other member who has none of their own for
    that workload (the lowest uid's where several members have one) and whose per-job
    limit allows it, within MAX_ENTRIES."""
    limits = limits or {}
    out = list(decisions)
    have = {(uid, d.fingerprint) for uid, d in decisions}
    for uid, d in sorted(decisions, key=lambda o: (o[0], o[1].fingerprint)):
        if uid not in members:
            continue
        for other in sorted(members):
            if (other, d.fingerprint) not in have and len(out) < MAX_ENTRIES and \
                    not beyond_limit(d, limits.get(other, JobLimit())):
                out.append((other, d))
                have.add((other, d.fingerprint))
    return out


def beyond_limit(d: Decision, limit: JobLimit) -> str:
    """What of a decision its user's association does not allow one job ("" when all)."""
    for what, value, most in (("cores", d.cpus, limit.cpus), ("MB", d.mem_mb, limit.mem_mb),
                              ("GPUs", d.gpus, limit.gpus)):
        if most and value > most:
            return (f"{value} {what}, over its user's per-job limit of {most} (MaxTRESPerJob): "
                    "Slurm would hold the job for ever, so the jobs run as asked")
    return ""


def beyond_shape(d: Decision, shape: NodeShape) -> str:
    """What of a decision no node of the partition has ("" when it fits): such an entry
    would make Slurm refuse the job, or leave it pending for ever."""
    if d.cpus < 1 or d.cpus > shape.cores:
        return f"{d.cpus} cores, the partition's nodes have {shape.cores}"
    if d.mem_mb < 1 or d.mem_mb > shape.mem_mb:
        return f"{d.mem_mb} MB, the partition's nodes have {shape.mem_mb}"
    if d.gpus > shape.gpus:
        return f"{d.gpus} GPUs, the partition's nodes have {shape.gpus}"
    if d.gpu_type and d.gpu_type not in shape.gpu_types:
        return (f"GPU type {d.gpu_type}, the partition has "
                f"{', '.join(shape.gpu_types) or 'untyped GPUs'}")
    return ""


def owned_by_other(path: Path) -> tuple[int, int] | None:
    """The table's owner when it is not the caller and the caller is root (who keeps the
    owner), None when it is the caller's or missing; SynergyError for anyone else, before
    any lock is taken: only its owner compiles it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    if st.st_uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        raise SynergyError(f"the decision table {path} belongs to uid {st.st_uid}; only its "
                           "owner compiles it (synergy plugin sync as that user)")
    return st.st_uid, st.st_gid


def write(path: Path, text: str) -> None:
    """Write the table whole; only its owner may replace it (root keeps the owner)."""
    owner = owned_by_other(path)
    try:
        atomic_write_text(path, text, 0o644)
        if owner:
            os.chown(path, *owner)
    except OSError as e:
        raise SynergyError(f"cannot write the decision table {path}: {e.strerror}") from None


def _limits_by_uid(slurm: Slurm, skipped: list[str]) -> dict[int, JobLimit]:
    """Accounting's per-job limits by uid; none (and a line saying so) when accounting
    cannot tell: Slurm still enforces them, a job past one then waits."""
    try:
        by_name = slurm.job_limits()
    except SynergyError as e:
        skipped.append(f"per-job limits not read from accounting ({e}); decisions are "
                       "not checked against them")
        return {}
    out = {}
    for name, limit in by_name.items():
        try:
            out[pwd.getpwnam(name).pw_uid] = limit
        except KeyError:
            continue        # an association of a user this host does not know
    return out


def sync(stores: Sequence[ProfileStore] | None = None, policy: Policy | None = None,
         slurm: Slurm | None = None, path: Path | None = None,
         partition: str | None = None) -> str:
    """Compile the table from the profile stores (every user's folder of the site's store,
    else the caller's own); returns a line saying what was written and what was left out."""
    skipped: list[str] = []
    if stores is None:
        stores, skipped = stores_to_compile()
    policy, catalog = (policy, site_catalog(policy_path())) if policy else \
        load_site(policy_path())
    path = path or table_path()
    owned_by_other(path)
    slurm = slurm or Slurm()
    partition = partition or slurm.default_partition()
    shape = node_shape(slurm, partition)
    # One sync at a time: two profiles finishing together must not let the older
    # store's table land last.
    limits = _limits_by_uid(slurm, skipped)
    with locked(path.with_name(f".{path.name}.lock")):
        decisions, left_out = compile_decisions(stores, shape, policy, catalog,
                                                limits=limits)
        write(path, render(decisions, policy, shape, partition))
    skipped += left_out
    where = str(stores[0].root) if len(stores) == 1 else \
        f"{len(stores)} users' folders" + (f" of {stores[0].root.parent}" if stores else "")
    line = f"decision table {path}: {len(decisions)} decision(s) from {where}"
    if skipped:
        shown = skipped[:SHOWN_SKIPPED] + ([f"... and {len(skipped) - SHOWN_SKIPPED} more"]
                                           if len(skipped) > SHOWN_SKIPPED else [])
        line += f"; {len(skipped)} left out:\n  " + "\n  ".join(shown)
    return line
