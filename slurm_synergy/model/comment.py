"""The job comment: the one wire format between `synergy submit`, the sbatch script,
etc/job_submit.lua, the node hooks, `synergy tune` and the reports, and what sacct keeps.

    synergy:fp=<16 hex> [req=cpus,mem,gpus] [work=i160] [profile=1] [asked=c2,m3072,g1[:TYPE]]
        [decision=c1,m1280,g1[:TYPE],w1[,p250]] [from=<job>] [by=<job>] [measured=run]
        [sub=<12 hex>] [tuned=c1,m1024] [tmin=3,p95,n2] [tback=20] [rescued=oom@12s|gpu-oom@12s]
        [pace=72]

A component of a job over two GPU types carries no fingerprint, so the shim leaves it
alone; its decision= is the planner's (the prolog reads its power limit as any other):

    synergy:hetero het=<component>,b<batch>,u<micro-batch>,a<accumulation>
        decision=c2,m1024,g1:TYPE,w1,p150 [sub=<12 hex>]

Who writes what: submit writes the fingerprint, req= (what the row pinned), work= (the
built-in trainer's iterations, i<n>, or epochs, e<n>: what a run time scales with) and
sub= (its sbatch call's tag); the shim (or submit in user mode) writes asked= and decision=, or
profile=1 for a workload it has no decision for; a job measured while it trained writes
measured=run in its own comment, and asked=, decision= and by=<itself> in those of its
workload's pending jobs, right-sized in place (decisions/pending.py), and drops asked=, decision=
and by= again where a later run drops that decision (a plain script's job gains
profile=1: its comment marks it for measuring as the shim's environment does); a
resubmission after
profiling writes from=; `synergy tune` writes tuned=; root's sync timer writes tmin= where
it set the job's --time-min (minutes), from a predicted run of p seconds resting on n
completed jobs (decisions/timelimits.py), and tback= where it put a running job's lowered
limit back to its --time (minutes), the job having run past that prediction; root's
rescue writes rescued=oom@<s>s (gpu-oom@<s>s) where a job that ran out of memory (GPU
memory) at the decided size after <s> seconds was put back with what it asked
(decisions/rescue.py); a run given fewer
cores than it asked writes pace=<percent> in its own comment where it trained at that
share of the rate its decision predicted, slower than their noise allows
(measure/inrun/pace.py). A mark
written again replaces the earlier one; the rest of the comment is the user's and is kept.
The Lua shim spells asked= and decision= the same way: tests/contract_cases.toml's
decisions come out of both as one comment (test_contract_cases.py), and test_comment.py
runs the rest through both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PREFIX = "synergy:fp="
# Marks a resubmission after profiling drops: the next decision is the shim's to make.
PROFILING_MARKS = ("profile", "asked", "decision", "from", "by", "measured")

# A gres type as the comment carries it (gres.conf's spelling).
GRES_TYPE = r"[A-Za-z0-9_.-]{1,32}"
# GPUs as a count, and the gres type where the job names one.
_GPUS = r"g(\d+)(?::(" + GRES_TYPE + r"))?"
_DECISION = re.compile(r"^c(\d+|\?),m(\d+|\?)," + _GPUS + r",w(\d+)(?:,p(\d+))?$")
_ASKED = re.compile(r"^c(\d+|-),m(\d+|-)," + _GPUS + "$")
_TAG = re.compile(r"^[0-9a-f]{12}$")
# A workload fingerprint: 16 lowercase hex digits, everywhere it is written or read
# (etc/job_submit.lua's FINGERPRINT_HEX is this one, rendered by plugin/contract.py).
FINGERPRINT_HEX = 16
FINGERPRINT = f"[0-9a-f]{{{FINGERPRINT_HEX}}}"
FINGERPRINT_RE = re.compile(f"^{FINGERPRINT}$")


@dataclass(frozen=True)
class Resources:
    """asked= and decision= read back; None where the comment says unknown (- or ?)."""

    cpus: int | None
    mem_mb: int | None
    gpus: int
    workers: int | None = None       # decision= only
    power_w: int | None = None       # decision= only, when it sets a limit
    gpu_type: str = ""               # the gres type, where one is named


HETERO = "synergy:hetero"
# Anywhere in a job's comment: the shim leaves that plain batch job alone.
OPT_OUT = "synergy:off"
# Anywhere in a job's comment: its --time stays its only limit (no --time-min is set).
TIME_AS_ASKED = "synergy:time-as-asked"
_TIME = re.compile(r"^(\d+),p(\d+),n(\d+)$")
_WORK = re.compile(r"^([ie])(\d{1,9})$")


def hetero_comment(component: int, batch: int, micro_batch: int, accumulation: int,
                   decision: str) -> str:
    """A heterogeneous job's component: its share of the batch and its decision."""
    return (f"{HETERO} het={component},b{batch},u{micro_batch},a{accumulation} "
            f"decision={decision}")


def job_comment(fingerprint: str, pinned: tuple[str, ...] = (), work: str = "") -> str:
    """What `synergy submit` starts a job's comment with."""
    return (PREFIX + fingerprint + (f" req={','.join(pinned)}" if pinned else "")
            + (f" work={work}" if work else ""))


def work(comment: str) -> tuple[str, int] | None:
    """The comment's work=: ("i", iterations) or ("e", epochs); None where none."""
    m = _WORK.match(marks(comment).get("work", ""))
    return (m.group(1), int(m.group(2))) if m and int(m.group(2)) > 0 else None


def fingerprint(comment: str) -> str | None:
    """The workload fingerprint a job carries, if the comment is one of ours."""
    if not comment.startswith(PREFIX):
        return None
    words = comment[len(PREFIX):].split()
    return words[0] if words and FINGERPRINT_RE.match(words[0]) else None


def marks(comment: str) -> dict[str, str]:
    """The key=value marks after the fingerprint; where one is written twice, the last
    (the shim appends after anything a user wrote)."""
    words = comment.split()
    if words and words[0].startswith(PREFIX):
        words = words[1:]
    return dict(w.split("=", 1) for w in words if "=" in w)


def pinned(comment: str) -> tuple[str, ...]:
    """What the row set itself (req=cpus,mem,gpus), which the site may let win."""
    return tuple(p for p in marks(comment).get("req", "").split(",") if p)


def without(comment: str, *names: str) -> str:
    """The comment less the named marks."""
    drop = re.compile(r"(?:^|\s+)(?:%s)=\S*" % "|".join(map(re.escape, names)))
    return drop.sub("", comment).strip()


def with_marks(comment: str, **values: str) -> str:
    """The comment with these marks set (an earlier one of the same name replaced)."""
    return " ".join([without(comment, *values), *(f"{k}={v}" for k, v in values.items())]).strip()


@dataclass(frozen=True)
class Marks:
    """A change to a job's comment after submission: marks dropped, then marks set (an
    earlier one of the same name replaced); the rest of the comment is kept. Slurm.mark
    is the one writer that applies it."""

    set: dict[str, str] = field(default_factory=dict)
    drop: tuple[str, ...] = ()

    def applied(self, comment: str) -> str:
        """`comment` with this change made."""
        kept = without(comment, *self.drop) if self.drop else comment
        return with_marks(kept, **self.set) if self.set else kept


def decision_text(cpus: int, mem_mb: int, gpus: int, workers: int, power_w: int = 0,
                  gpu_type: str = "") -> str:
    """decision=...: cores, MB, GPUs (and their type), loader workers and, where set, the
    power limit."""
    return (f"c{cpus},m{mem_mb},g{gpus}{':' + gpu_type if gpu_type else ''},w{workers}"
            + (f",p{power_w}" if power_w else ""))


def asked_text(cpus: int | None, mem_mb: int | None, gpus: int, gpu_type: str = "") -> str:
    """asked=...: what the job asked before a decision replaced it (- where unset)."""
    return (f"c{'-' if cpus is None else cpus},m{'-' if mem_mb is None else mem_mb},"
            f"g{gpus}{':' + gpu_type if gpu_type else ''}")


def _count(text: str | None, most: int = 1 << 20) -> int | None:
    """A number from a mark; anything out of range is unknown (users write comments too,
    and 65534 is Slurm's "not set")."""
    return int(text) if text and text.isdigit() and 0 < int(text) < min(most, 65534) else None


def decision(comment: str) -> Resources | None:
    """The comment's decision= (cores, MB per node, GPUs and type, loader workers, power
    limit in W); None where it has none or one this version cannot read."""
    m = _DECISION.match(marks(comment).get("decision", ""))
    if not m:
        return None
    cpus, mem, gpus, gtype, workers, power = m.groups()
    return Resources(_count(cpus), _count(mem, 1 << 40), int(gpus), int(workers),
                     _count(power) if power else None, gtype or "")


def asked(comment: str) -> Resources | None:
    """The comment's asked= (cores, MB per node, GPUs and type, as the job was
    submitted; None for a value it left to Slurm); None where it has none."""
    m = _ASKED.match(marks(comment).get("asked", ""))
    if not m:
        return None
    cpus, mem, gpus, gtype = m.groups()
    return Resources(_count(cpus), _count(mem, 1 << 40), int(gpus), gpu_type=gtype or "")


def time_text(time_min: int, predicted_s: float, jobs: int) -> str:
    """tmin=...: the --time-min set (minutes), the predicted run (s), the jobs it rests on."""
    return f"{time_min},p{predicted_s:.0f},n{jobs}"


def time_min(comment: str) -> tuple[int, int, int] | None:
    """The comment's tmin=: the --time-min set (minutes), the run predicted (s) and the
    completed jobs it rests on; None where none."""
    m = _TIME.match(marks(comment).get("tmin", ""))
    if not m or _count(m.group(1)) is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def time_back(comment: str) -> int | None:
    """The comment's tback=: the --time (minutes) root's timer gave back to a running job
    whose lowered limit it would have outrun; None where none."""
    return _count(marks(comment).get("tback", ""))


# rescued=<kind>@<s>s: what the run ran out of at the decided size, by its mark's kind.
RAN_OUT_OF = {"oom": "memory", "gpu-oom": "GPU memory"}


@dataclass(frozen=True)
class RescueMark:
    """A job root put back with what it asked after its run at the decided size ran out."""

    ran_out_of: str          # "memory" (host, --mem) or "GPU memory" (the decided GPUs)
    lost_s: int              # the seconds of the run it lost


def rescue_mark(kind: str, lost_s: int) -> str:
    """The value of rescued= for a run of `lost_s` seconds that ran out of RAN_OUT_OF[kind]."""
    assert kind in RAN_OUT_OF, kind
    return f"{kind}@{lost_s}s"


def rescued(comment: str) -> RescueMark | None:
    """The comment's rescued=<kind>@<s>s: what the run ran out of at the decided size, and
    its seconds, before root put the job back with what it asked; None where none."""
    m = re.fullmatch(r"([a-z-]{1,8})@(\d{1,9})s", marks(comment).get("rescued", ""))
    return RescueMark(RAN_OUT_OF[m.group(1)], int(m.group(2))) \
        if m and m.group(1) in RAN_OUT_OF else None


def pace(comment: str) -> int | None:
    """The comment's pace=: the percent of its decision's predicted rate a right-sized run
    trained at, where that was slower than their noise allows; None where none."""
    m = re.fullmatch(r"(\d{1,3})", marks(comment).get("pace", ""))
    return int(m.group(1)) if m else None


def tag(comment: str) -> str | None:
    """The sbatch call's tag (sub=), which reconciling the ledger finds jobs by."""
    value = marks(comment).get("sub", "")
    return value if _TAG.match(value) else None
