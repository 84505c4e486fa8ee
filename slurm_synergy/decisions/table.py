"""The decision table: every profiled workload's decision, in the form job_submit.lua reads.

slurmctld runs the Lua shim on every submission, so the table is plain lines, sorted by
uid and fingerprint so that the shim finds one by halving (it never parses the whole
table: a table at its cap reloads in milliseconds). Its first line carries a
generation (a hash of the rest), what the partition's nodes have and the per-job caps of
each QOS; its last line repeats the generation and the count, so a table cut short is
told from a whole one; the shim reads it again whenever the file's inode, size or times
change.

    synergy-decisions 5 gen=<hash> partition=gpu user_wins=0 profile_new=1 max_cpus=64
        max_mem_mb=515000 max_gpus=8 gpu_types=a100,h100 plain=1 skip_partitions=debug
        skip_accounts= skip_uids=1003 limits=1 qos=normal:c0:m0:g0,short:c4:m16000:g1
        entries=2                                                       (one line)
    <uid> <fingerprint> <cpus> <mem_mb> <gpus> <gpu_type or -> <workers>
        <power_limit_w or 0> <training processes per task> <shared: 0 or 1>
    <uid> <fingerprint> none
    end gen=<hash> entries=2

An entry is the decision from one user's profile, and the shim applies it to that
submitting uid's jobs alone; a `none` entry is a workload whose last marked run had
nothing to measure (profiles.py's hold): its jobs keep what they ask and are not marked
for measuring again while the hold lasts; a shared one (policy share_group: another member's profile)
only where it grows the job (`model/rightsize.py`). A QOS's caps (0: none) are what a job
that names it may have at most: the shim leaves such a job as asked where the decision
is past them; a job that names no QOS was checked against its user's own at compile.

Every value is clamped to the shim's hard bounds before it is written, and the table is
never written past the shim's size or entry limits: past them, the users with the most
entries lose entries first (`fit`). It lives beside slurm.conf (where slurmctld finds
job_submit.lua), is written whole (temporary file + rename), readable by all and
writable only by its owner. Compiling it from what users wrote is decisions/sync.py.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from slurm_synergy import paths
from slurm_synergy.fileio import atomic_write_text, read_untrusted_bytes
# Hard bounds the shim also enforces, whatever the header says (rendered into its HARD).
from slurm_synergy.model.bounds import (MAX_CPUS, MAX_GPUS, MAX_MEM_MB, MAX_POWER_W, MAX_PROCS,
                                        MAX_WORKERS)
from slurm_synergy.model.comment import FINGERPRINT, GRES_TYPE
from slurm_synergy.model.engine import Decision, NodeShape
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.policy import Policy
from slurm_synergy.decisions.limits import Cap

TABLE_NAME = "synergy-decisions.tbl"
MAGIC = "synergy-decisions"
FORMAT = 5
# The shim refuses a table of more entries or bytes (job_submit.lua's MAX_ENTRIES and
# MAX_BYTES); a user's profiles past MAX_PER_USER are left out (decisions/sync.py).
MAX_ENTRIES = 200000
MAX_BYTES = 16 * 1024 * 1024
MAX_PER_USER = 2000
# A QOS name the header can carry (Slurm's names are letters, digits, - and _).
QOS_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
ENTRY_RE = re.compile(rf"^(\d{{1,10}}) ({FINGERPRINT}) (\d{{1,5}}) (\d{{1,8}}) (\d{{1,2}}) "
                      rf"({GRES_TYPE}|-) (\d{{1,4}}) (\d{{1,4}}) (\d{{1,3}}) ([01])$")
HELD_RE = re.compile(rf"^(\d{{1,10}}) ({FINGERPRINT}) none$")
END_RE = re.compile(r"^end gen=([0-9a-f]+) entries=(\d+)$")


@dataclass(frozen=True)
class Owned:
    """A decision and the uid whose jobs it sizes; `shared` where it came from another
    member's profile (share_group): the shim applies it only where it grows the job."""

    uid: int
    decision: Decision
    shared: bool = False

    @property
    def fingerprint(self) -> str:
        """The workload the decision is of."""
        return self.decision.fingerprint


@dataclass(frozen=True)
class Held:
    """A workload of `uid` whose last marked run had nothing to measure (no training
    step, or processes on cores of their own): the shim leaves its jobs as asked and
    no longer marks them for measuring (its `none` line)."""

    uid: int
    fingerprint: str


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
    shared: bool = False


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, int(value)))


def entry_of(owned: Owned) -> TableEntry:
    """The line for a decision, every value within the shim's hard bounds."""
    d = owned.decision
    return TableEntry(owned.uid, d.fingerprint, _clamp(d.cpus, 1, MAX_CPUS),
                      _clamp(d.mem_mb, 1, MAX_MEM_MB), _clamp(d.gpus, 0, MAX_GPUS),
                      d.gpu_type, _clamp(d.workers, 0, MAX_WORKERS),
                      _clamp(d.power_limit_w, 0, MAX_POWER_W), _clamp(d.procs, 1, MAX_PROCS),
                      owned.shared)


def line_of(e: TableEntry | Held) -> str:
    """An entry's line in the table, as the shim reads it ("-" for no GPU type)."""
    if isinstance(e, Held):
        return f"{e.uid} {e.fingerprint} none\n"
    return (f"{e.uid} {e.fingerprint} {e.cpus} {e.mem_mb} {e.gpus} {e.gpu_type or '-'} "
            f"{e.workers} {e.power_limit_w} {e.procs} {int(e.shared)}\n")


def row_of(row: Owned | Held) -> TableEntry | Held:
    """What a row of the compiled table is as an entry."""
    return row if isinstance(row, Held) else entry_of(row)


def table_path() -> Path:
    """SYNERGY_DECISIONS, else beside the slurm.conf in use (where job_submit.lua is)."""
    if os.environ.get("SYNERGY_DECISIONS"):
        return Path(os.environ["SYNERGY_DECISIONS"])
    return paths.slurm_conf_file().parent / TABLE_NAME


def qos_text(caps: Mapping[str, Cap]) -> str:
    """The header's qos=: each QOS's per-job caps (0: none), names Slurm could have."""
    return ",".join(f"{name}:c{c.cpus}:m{c.mem_mb}:g{c.gpus}"
                    for name, c in sorted(caps.items()) if QOS_NAME.fullmatch(name))


def render(owned: Sequence[Owned | Held], policy: Policy, shape: NodeShape,
           partition: str = "", qos: Mapping[str, Cap] | None = None) -> str:
    """The table's text; `owned` must fit (`fit`) and name each (uid, fingerprint) once.
    `qos`: each QOS's caps where Slurm enforces accounting's limits, None where it does
    not."""
    lines = sorted((row_of(o) for o in owned), key=lambda e: (e.uid, e.fingerprint))
    body = "".join(map(line_of, lines))
    gen = hashlib.sha256(body.encode()).hexdigest()[:12]
    head = (f"{MAGIC} {FORMAT} gen={gen} partition={partition} "
            f"user_wins={int(policy.user_request_wins)} "
            f"profile_new={int(policy.profile_new)} max_cpus={min(shape.cores, MAX_CPUS)} "
            f"max_mem_mb={min(shape.mem_mb, MAX_MEM_MB)} max_gpus={min(shape.gpus, MAX_GPUS)} "
            f"gpu_types={','.join(shape.gpu_types)} plain={int(policy.plain_scripts)} "
            f"skip_partitions={','.join(policy.skip_partitions)} "
            f"skip_accounts={','.join(policy.skip_accounts)} "
            f"skip_uids={','.join(str(u) for u in uids_of(policy.skip_users))} "
            f"limits={int(qos is not None)} qos={qos_text(qos or {})} "
            f"entries={len(lines)}\n")
    return head + body + f"end gen={gen} entries={len(lines)}\n"


# Room for the header and the last line, whatever the policy names (names are bounded).
HEADER_ROOM = 64 * 1024


def fit(owned: Sequence[Owned | Held], max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES - HEADER_ROOM
        ) -> tuple[list[Owned | Held], dict[int, int]]:
    """`owned` within the table's limits: where it is past them, the users with the most
    entries are cut first (each to the same most, the last ones by fingerprint), so a
    user of few decisions keeps them all. Returns what is kept and how many entries each
    cut user lost."""
    size = {id(o): len(line_of(row_of(o))) for o in owned}
    by_uid: dict[int, list[Owned | Held]] = {}
    for o in sorted(owned, key=lambda o: (o.uid, o.fingerprint)):
        by_uid.setdefault(o.uid, []).append(o)

    def within(most: int) -> bool:
        """Whether keeping at most `most` entries per user fits the table's limits."""
        kept = [o for mine in by_uid.values() for o in mine[:most]]
        return len(kept) <= max_entries and sum(size[id(o)] for o in kept) <= max_bytes

    top = max((len(m) for m in by_uid.values()), default=0)
    if within(top):
        return list(owned), {}
    low, high = 0, top          # within(low) holds, within(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if within(mid) else (low, mid)
    kept = [o for mine in by_uid.values() for o in mine[:low]]
    cut = {uid: len(mine) - low for uid, mine in by_uid.items() if len(mine) > low}
    return kept, cut


def uids_of(names: Sequence[str]) -> list[int]:
    """The uids of the named users this host knows, in order (the shim sees uids)."""
    out = []
    for name in names:
        try:
            out.append(pwd.getpwnam(name).pw_uid)
        except KeyError:
            continue        # no such user here: nothing of theirs to skip
    return out


def read(path: Path) -> tuple[dict[str, str], dict[tuple[int, str], TableEntry | Held]]:
    """The header's fields and the entries by (uid, fingerprint); SynergyError naming the
    line if malformed, or where the table is not whole."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SynergyError(f"cannot read the decision table {path}: {e}") from None
    if not lines or not lines[0].startswith(f"{MAGIC} {FORMAT} "):
        raise SynergyError(f"{path} is not a version {FORMAT} decision table")
    header = dict(word.split("=", 1) for word in lines[0].split()[2:] if "=" in word)
    end = END_RE.match(lines[-1]) if len(lines) > 1 else None
    if end is None or end.groups() != (header.get("gen"), header.get("entries")):
        raise SynergyError(f"{path} is not whole: its last line does not close its "
                           "generation")
    entries: dict[tuple[int, str], TableEntry | Held] = {}
    for number, line in enumerate(lines[1:-1], start=2):
        held = HELD_RE.match(line)
        if held:
            entries[int(held[1]), held[2]] = Held(int(held[1]), held[2])
            continue
        m = ENTRY_RE.match(line)
        if not m:
            raise SynergyError(f"{path} line {number} is malformed: {line[:80]!r}")
        uid, fp, cpus, mem, gpus, gtype, workers, power, procs, shared = m.groups()
        entries[int(uid), fp] = TableEntry(int(uid), fp, int(cpus), int(mem), int(gpus),
                                           "" if gtype == "-" else gtype, int(workers),
                                           int(power), int(procs), shared == "1")
    return header, entries


def entries_of(entries: dict[tuple[int, str], TableEntry | Held],
               uid: int | None = None) -> dict[str, TableEntry]:
    """The entries that size the jobs `uid` (the caller) submits, by fingerprint (a
    held workload's none, which sizes nothing, left out)."""
    uid = os.geteuid() if uid is None else uid
    return {fp: e for (owner, fp), e in entries.items()
            if owner == uid and isinstance(e, TableEntry)}


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


def write(path: Path, text: str) -> bool:
    """Write the table whole; only its owner may replace it (root keeps the owner).
    False where it holds `text` already: left alone, as the shim reloads a table whose
    file changed (a timer's sync every few seconds would otherwise reload it each time)."""
    if len(text.encode()) > MAX_BYTES:
        raise SynergyError(f"the decision table would be {len(text.encode())} bytes, past the "
                           f"shim's {MAX_BYTES}; not written")
    owner = owned_by_other(path)
    if _holds(path, text):
        return False
    try:
        atomic_write_text(path, text, 0o644)
        if owner:
            os.chown(path, *owner)
    except OSError as e:
        raise SynergyError(f"cannot write the decision table {path}: {e.strerror}") from None
    return True


def _holds(path: Path, text: str) -> bool:
    """Whether the table's file holds `text` (a regular file, read up to the cap)."""
    try:
        return read_untrusted_bytes(path, MAX_BYTES) == text.encode()
    except (OSError, SynergyError):
        return False
