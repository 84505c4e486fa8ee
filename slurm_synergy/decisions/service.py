"""The one decision service: (user, workload, partition, QOS) in, a decision or a refusal
with its reason out, after every check.

Every path that applies a decision asks it: the table's compile (decisions/sync.py),
the in-place update of pending jobs, user-mode submission, resubmission and `synergy
plugin explain`. The checks, in order: the user's profile of the workload (their own
store), the engine under the site policy for the partition's smallest node, the node
shape, and the user's association and QOS limits for one job (decisions/limits.py: a
decision past them would leave the job pending for ever). The node shapes and the limits
are read from Slurm once per service and read again after LIMITS_TTL_S, so a process that
lives for hours (a profiled job's supervisor) does not decide from stale limits.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from slurm_synergy.decisions import limits as acct
from slurm_synergy.decisions.table import QOS_NAME, Owned
from slurm_synergy.model.comment import GRES_TYPE
from slurm_synergy.model.engine import Decision, NodeShape, NoDecision, decide
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.gpus import Catalog
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.profile import Profile, ProfileError
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.slurm import Slurm, node_shape, user_name
from slurm_synergy.site import Site

LIMITS_TTL_S = 300.0
NO_PROFILE = "no profile of the workload"
_GPU_TYPE = re.compile(GRES_TYPE)


@dataclass(frozen=True)
class DecisionRequest:
    """A job's workload as it will run: who submits it, where, under which QOS."""

    uid: int
    fingerprint: str
    partition: str = ""          # "" the default partition
    qos: str = ""                # "" the QOS a job of the user gets without --qos


@dataclass(frozen=True)
class Refusal:
    """No decision for this request: its jobs run as asked. `why` in a line; `reasons`
    the engine's steps where it weighed a profile."""

    fingerprint: str
    why: str
    reasons: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"workload {self.fingerprint}: {self.why}"


Answer = Decision | Refusal


def own_store(store: ProfileStore) -> Callable[[int], ProfileStore | None]:
    """The caller's store alone, for a service outside the table's compile: a user's
    command or job decides from that user's own profiles."""
    me = os.geteuid()
    return lambda uid: store if uid == me else None


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


class DecisionService:
    """Decisions for one command's or one job's lifetime, against one site policy."""

    def __init__(self, slurm: Slurm, policy: Policy, catalog: Catalog | None = None,
                 stores: Callable[[int], ProfileStore | None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 members: Callable[[str], set[int]] = group_members):
        self.slurm, self.policy = slurm, policy
        self.catalog = catalog or Catalog({}, "no GPU catalog was given")
        self._stores = stores or (lambda uid: None)
        self._clock = clock
        self._members = members
        self._shapes: dict[str, NodeShape] = {}
        self._limits: tuple[float, acct.Limits | SynergyError] | None = None
        self._caps: dict[tuple[int, str], acct.Cap | None] = {}    # by (uid, QOS)

    @classmethod
    def for_site(cls, site: Site,
                 stores: Callable[[int], ProfileStore | None] | None = None
                 ) -> "DecisionService":
        """The service of `site` (its policy, catalog and Slurm, read once where its entry
        point started)."""
        return cls(site.slurm, site.policy, site.catalog, stores)

    # --- what Slurm says, cached ----------------------------------------------
    def shape(self, partition: str = "") -> NodeShape:
        """The smallest node of `partition` ("": the default partition)."""
        if partition not in self._shapes:
            self._shapes[partition] = node_shape(self.slurm, partition or None)
        return self._shapes[partition]

    def limits(self) -> acct.Limits:
        """Accounting's limits, read at most once per LIMITS_TTL_S; SynergyError where
        Slurm enforces them and accounting cannot say what they are."""
        now = self._clock()
        if self._limits is None or now - self._limits[0] > LIMITS_TTL_S:
            self._limits = (now, self._read_limits())
            self._caps = {}
        got = self._limits[1]
        if isinstance(got, SynergyError):
            raise got
        return got

    def _read_limits(self) -> acct.Limits | SynergyError:
        try:
            if not acct.enforced(self.slurm.config().get("AccountingStorageEnforce", "")):
                return acct.Limits(enforced=False)
            return acct.Limits(True, tuple(acct.associations(
                self.slurm.association_rows(acct.ASSOC_FIELDS))),
                acct.qos_list(self.slurm.qos_rows(acct.QOS_FIELDS)))
        except SynergyError as e:
            return SynergyError(f"accounting's limits cannot be read ({str(e).splitlines()[0]})")

    # --- decisions -------------------------------------------------------------
    def decide(self, req: DecisionRequest) -> Answer:
        """The decision for `req` from its user's own profile, or why there is none."""
        store = self._stores(req.uid)
        if store is None or not store.has(req.fingerprint):
            return Refusal(req.fingerprint, NO_PROFILE)
        try:
            profile = store.load(req.fingerprint)
        except ProfileError as e:
            return Refusal(req.fingerprint, f"its profile cannot be used: {e}")
        return self.judge(req, profile)

    def judge(self, req: DecisionRequest, profile: Profile) -> Answer:
        """The decision `profile` (the user's own) gives `req`, after every check."""
        try:
            shape = self.shape(req.partition)
        except SynergyError as e:
            return Refusal(req.fingerprint, f"the partition's nodes are unknown: {e}")
        try:
            d = decide(profile, shape, self.policy, self.catalog)
        except NoDecision as e:
            return Refusal(req.fingerprint, str(e), e.reasons)
        except (ValueError, ArithmeticError) as e:
            return Refusal(req.fingerprint, f"its profile cannot be decided from: {e}")
        why = beyond_shape(d, shape) or self.beyond_limits(d, req.uid, req.qos)
        return Refusal(req.fingerprint, why, d.reasons) if why else d

    def beyond_limits(self, d: Decision, uid: int, qos: str = "") -> str:
        """Why one job of `uid` may not have `d` under accounting's limits ("" when it
        may)."""
        try:
            limits = self.limits()
        except SynergyError as e:
            return f"{e}: Slurm holds jobs to them, so none is applied"
        if qos and not QOS_NAME.fullmatch(qos):
            return f"QOS {qos!r} is not one a decision can be checked against"
        name = user_name(uid)
        if (uid, qos) not in self._caps:
            self._caps[uid, qos] = limits.for_user(name, qos)
        cap = self._caps[uid, qos]
        if cap is None:
            return (f"accounting has no association of {name}"
                    + (f" or no QOS {qos}" if qos else "") + " to check it against")
        past = cap.past(d.cpus, d.mem_mb, d.gpus)
        if past:
            return (f"{past}, the most one job of {name} may have (association and "
                    f"{'QOS ' + qos if qos else 'default QOS'} limits): Slurm would hold "
                    "the job for ever, so the jobs run as asked")
        return ""

    def share(self, owned: Sequence[Owned], skipped: list[str]) -> list[Owned]:
        """`owned` and, where the policy names a share_group, each member's decision for
        every other member who has none of their own for that workload (the lowest uid's
        where several members have one) and whose limits allow it; applied only where
        it grows a job, unless the policy says shared_may_shrink."""
        name = self.policy.share_group
        if not name:
            return list(owned)
        try:
            members = self._members(name)
        except KeyError:
            skipped.append(f"share_group {name!r}: no such group, so no decision is shared")
            return list(owned)
        out = list(owned)
        have = {(o.uid, o.decision.fingerprint) for o in owned}
        for o in sorted(owned, key=lambda o: (o.uid, o.decision.fingerprint)):
            if o.uid not in members or o.shared:
                continue
            for other in sorted(members):
                if (other, o.decision.fingerprint) in have:
                    continue
                why = self.beyond_limits(o.decision, other)
                if why:
                    skipped.append(f"{o.decision.fingerprint} shared with uid {other}: {why}")
                    continue
                out.append(Owned(other, o.decision, shared=not self.policy.shared_may_shrink))
                have.add((other, o.decision.fingerprint))
        return out


def beyond_shape(d: Decision, shape: NodeShape) -> str:
    """What of a decision no node of the partition has ("" when it fits): such an entry
    would make Slurm refuse the job, or leave it pending for ever."""
    if d.cpus < 1 or d.cpus > shape.cores:
        return f"{d.cpus} cores, the partition's nodes have {shape.cores}"
    if d.mem_mb < 1 or d.mem_mb > shape.mem_mb:
        return f"{d.mem_mb} MB, the partition's nodes have {shape.mem_mb}"
    if d.gpus > shape.gpus:
        return f"{d.gpus} GPUs, the partition's nodes have {shape.gpus}"
    if d.gpu_type and (d.gpu_type not in shape.gpu_types or not _GPU_TYPE.fullmatch(d.gpu_type)):
        return (f"GPU type {d.gpu_type}, the partition has "
                f"{', '.join(shape.gpu_types) or 'untyped GPUs'}")
    return ""
