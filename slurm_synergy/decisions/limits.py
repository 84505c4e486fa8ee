"""What accounting lets one job of a user have: association and QOS limits, as Slurm holds
a job to them (a job past one pends for ever: Slurm checks them after job_submit, and
rejects only where a QOS says DenyOnLimit).

Read from `sacctmgr` (slurm/gateway.py), which prints an association's Max* limits, QOS list and
default QOS with what it inherits from its accounts; Grp limits are an account's own, and
a single job past any ancestor's cannot run either. A job that names no QOS gets its
association's default, else the one QOS it may use, else root's default, else "normal"
(Slurm's assoc_mgr_get_default_qos_info). Per job, one node: MaxTRESPerJob,
MaxTRESPerNode, the QOS's MaxTRESPerUser and each GrpTRES all bound what a decision may
ask for. Without AccountingStorageEnforce=limits (or safe) Slurm holds no job to them.
"""

from __future__ import annotations

import functools
from dataclasses import astuple, dataclass, field
from typing import Mapping, Sequence

from slurm_synergy.model.units import mem_mb

DEFAULT_QOS = "normal"       # what Slurm gives where nothing else names one


@dataclass(frozen=True)
class Cap:
    """The most of each resource one job may have (0: no limit): cores, MB, GPUs."""

    cpus: int = 0
    mem_mb: int = 0
    gpus: int = 0

    def __and__(self, other: "Cap") -> "Cap":
        """Each resource's lower limit, where either sets one."""
        return Cap(*(min(x, y) if x and y else x or y
                     for x, y in zip(astuple(self), astuple(other))))

    def past(self, cpus: int, mem: int, gpus: int) -> str:
        """What of a request is past this cap ("" when nothing is)."""
        for what, value, most in (("cores", cpus, self.cpus), ("MB", mem, self.mem_mb),
                                  ("GPUs", gpus, self.gpus)):
            if most and value > most:
                return f"{value} {what}, over {most}"
        return ""


NONE = Cap()


def cap_of(tres: str) -> Cap:
    """A TRES list as sacctmgr prints it (cpu=2,gres/gpu=1,mem=1000M) as a Cap; a value
    it cannot read counts as no limit of that resource."""
    items = dict(item.split("=", 1) for item in tres.split(",") if "=" in item)

    def whole(text: str) -> int:
        """A whole number's value; 0 (no limit) for anything else."""
        return int(text) if text.isdigit() else 0
    return Cap(whole(items.get("cpu", "")), int(mem_mb(items.get("mem", "")) or 0),
               whole(items.get("gres/gpu", "")))


@dataclass(frozen=True)
class Association:
    """One row of `sacctmgr show associations`: an account's own (user "") or a user's."""

    account: str
    user: str
    parent: str                  # the account above (an account's row), "" at root
    qos: tuple[str, ...]         # the QOS it may use
    default_qos: str
    per_job: Cap                 # MaxTRESPerJob & MaxTRESPerNode, inherited
    group: Cap                   # GrpTRES, its own


@dataclass(frozen=True)
class Qos:
    name: str
    per_job: Cap                 # MaxTRESPerJob & MaxTRESPerNode & MaxTRESPerUser & GrpTRES


ASSOC_FIELDS = ("account", "user", "parentname", "qos", "defaultqos", "maxtresperjob",
                "maxtrespernode", "grptres")
QOS_FIELDS = ("name", "maxtresperjob", "maxtrespernode", "maxtresperuser", "grptres")


def associations(rows: Sequence[Sequence[str]]) -> list[Association]:
    """Rows of ASSOC_FIELDS as sacctmgr prints them; others skipped."""
    out = []
    for row in rows:
        if len(row) != len(ASSOC_FIELDS):
            continue
        account, user, parent, qos, default, per_job, per_node, grp = row
        out.append(Association(account, user, parent, tuple(q for q in qos.split(",") if q),
                               default, cap_of(per_job) & cap_of(per_node), cap_of(grp)))
    return out


def qos_list(rows: Sequence[Sequence[str]]) -> dict[str, Qos]:
    """Rows of QOS_FIELDS as sacctmgr prints them, by name."""
    out = {}
    for row in rows:
        if len(row) != len(QOS_FIELDS):
            continue
        name, per_job, per_node, per_user, grp = row
        out[name] = Qos(name, cap_of(per_job) & cap_of(per_node) & cap_of(per_user)
                        & cap_of(grp))
    return out


@dataclass(frozen=True)
class Limits:
    """Accounting's limits as they bound one job; `enforced` False where Slurm holds no
    job to them (every cap is then none)."""

    enforced: bool
    assocs: tuple[Association, ...] = ()
    qos: Mapping[str, Qos] = field(default_factory=dict)

    def _default_qos(self, a: Association) -> str:
        if a.default_qos:
            return a.default_qos
        if len(a.qos) == 1:
            return a.qos[0]
        root = next((r for r in self.assocs if r.account == "root" and not r.user), None)
        return root.default_qos if root is not None and root.default_qos else DEFAULT_QOS

    @functools.cached_property
    def _accounts(self) -> dict[str, Association]:
        return {r.account: r for r in self.assocs if not r.user}

    @functools.cached_property
    def _by_user(self) -> dict[str, list[Association]]:
        out: dict[str, list[Association]] = {}
        for a in self.assocs:
            if a.user:
                out.setdefault(a.user, []).append(a)
        return out

    def _groups_above(self, a: Association) -> Cap:
        """The GrpTRES of the association and every account above it."""
        accounts = self._accounts
        cap, seen, account = a.group, set(), a.account
        while account and account not in seen:
            seen.add(account)
            row = accounts.get(account)
            if row is None:
                break
            cap = cap & row.group
            account = row.parent
        return cap

    def for_user(self, user: str, qos: str = "") -> Cap | None:
        """The most one job of `user` may have under `qos` ("" the QOS a job gets without
        --qos), the tightest over the user's associations (a job may name any of its
        accounts); None where accounting has no association of theirs, or the QOS is
        unknown, while limits are enforced."""
        if not self.enforced:
            return NONE
        mine = self._by_user.get(user, [])
        if not mine:
            return None
        cap = NONE
        for a in mine:
            name = qos or self._default_qos(a)
            q = self.qos.get(name)
            if q is None:
                return None
            cap = cap & a.per_job & self._groups_above(a) & q.per_job
        return cap

    def qos_caps(self) -> dict[str, Cap]:
        """Each QOS's own bound on one job (what a job that names it may have at most)."""
        return {name: q.per_job for name, q in self.qos.items()} if self.enforced else {}


def enforced(setting: str) -> bool:
    """Whether slurm.conf's AccountingStorageEnforce holds jobs to these limits."""
    words = {w.strip().lower() for w in setting.split(",")}
    return bool(words & {"limits", "safe"})
