"""Allocation policies: which of the round's jobs run, where, with how many cores and how
much memory per GPU.

Each policy gets the jobs in the scheduling policy's order and a cluster with nothing
placed (every lease ends with the round, as in Synergy), and returns its grants. All of
them size jobs from the same engine-made `Demands` (demand.py).

- proportional: every job its GPU-proportional share.
- greedy (Synergy-GREEDY): the ideal demand where it fits, else the job waits.
- tune (Synergy-TUNE): the ideal, else the share, else the share after taking cores and
  memory back from jobs on one server that hold more than their share.
- opt: the round's best total speed (optimal.py).
- synergy-slurm (this project's): TUNE's admission and placement (the same jobs run, on
  the same servers), then every placed job is cut to its floor (as fast as its share,
  often less). Each server's spare cores and memory then go first to whole ideals, the
  most speed per core (weighted by 1/remaining time) first, and what no ideal fits into
  goes step by step to the job it speeds up most, up to the plugin's claim and then up
  to the ideal: what TUNE leaves idle or gives where it buys little goes where it buys
  most, whether speed grows with every core (the matrix) or comes only with the whole
  ideal (Synergy's simulator, where steps alone lost to TUNE by 1-5%). (Placing
  every job at its floor first, to run more of them, lost to TUNE below full load: it
  split servers that TUNE gives whole to a job that can use them.)
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Sequence

from slurm_synergy.simulate.cluster import ClusterSpec
from slurm_synergy.simulate.demand import Config, Demands
from slurm_synergy.simulate.workload import Workload


@dataclass(slots=True)
class Want:
    """One job the allocator may run this round."""

    key: int
    gpus: int
    work: Workload
    demands: Demands
    weight: float = 1.0     # synergy-slurm: 1 / remaining time (Smith's rule)


@dataclass(slots=True)
class Grant:
    key: int
    placement: tuple[tuple[int, int], ...]    # (server, GPUs there)
    cpus: int                                 # per GPU
    mem_gb: float                             # per GPU


class Free:
    """What is left on each server this round."""

    __slots__ = ("gpus", "cpus", "mem", "total_gpus", "_most", "_stale")

    # First fit over every server was most of a run at 4,096 GPUs: past the servers
    # whose cores are spoken for, each job scanned ~100 that could not hold it. Servers
    # go in blocks of BLOCK, each knowing the most cores and memory free on any of its
    # servers with a free GPU, so a scan skips the blocks that cannot hold the job. A
    # block changed is worked out again when a scan next reaches it.
    BLOCK = 16

    def __init__(self, cluster: ClusterSpec):
        self.gpus = [s.gpus for s in cluster.servers]
        self.cpus = [float(s.cpus) for s in cluster.servers]
        self.mem = [s.mem_gb for s in cluster.servers]
        self.total_gpus = sum(self.gpus)
        self._most = [(0.0, 0.0)] * -(-len(self.gpus) // self.BLOCK)
        self._stale = set(range(len(self._most)))

    def _block_most(self, first: int) -> tuple[float, float]:
        """The most cores and memory free on one server with a free GPU in the block
        (-1, -1 if none has a GPU)."""
        here = [s for s in range(first, min(first + self.BLOCK, len(self.gpus)))
                if self.gpus[s]]
        if not here:
            return -1.0, -1.0
        return max(self.cpus[s] for s in here), max(self.mem[s] for s in here)

    def _changed(self, servers) -> None:
        self._stale.update(s // self.BLOCK for s in servers)

    def first_fit(self, gpus: int, cpus: float, mem: float) -> tuple[tuple[int, int], ...] | None:
        """Servers in order, as many of the job's GPUs on each as its cores and memory
        per GPU allow there (Synergy's first fit, GPU by GPU); None if they do not all fit."""
        if gpus > self.total_gpus:
            return None
        placed, left = [], gpus
        need_c, need_m = cpus - 1e-9, mem - 1e-9
        for b, (most_c, most_m) in enumerate(self._most):
            if b in self._stale:
                self._stale.discard(b)
                most_c, most_m = self._most[b] = self._block_most(b * self.BLOCK)
            if most_c < need_c or most_m < need_m or most_c < 0:
                continue
            for s in range(b * self.BLOCK, min((b + 1) * self.BLOCK, len(self.gpus))):
                free = self.gpus[s]
                if not free:
                    continue
                n = min(free, left, int(self.cpus[s] / cpus + 1e-9) if cpus else left,
                        int(self.mem[s] / mem + 1e-9) if mem else left)
                if n > 0:
                    placed.append((s, n))
                    left -= n
                    if not left:
                        return tuple(placed)
        return None

    def whole(self, gpus: int, cpus: float, mem: float) -> list[int]:
        """The servers that can hold all of a job's GPUs at these cores and memory each."""
        return [s for s, n in enumerate(self.gpus)
                if n >= gpus and self.cpus[s] + 1e-9 >= gpus * cpus
                and self.mem[s] + 1e-9 >= gpus * mem]

    def take(self, placement: Sequence[tuple[int, int]], cpus: float, mem: float,
             sign: int = 1) -> None:
        """Take `cpus` cores and `mem` GB per GPU, and the GPUs, on each server of the placement;
        with `sign` -1 give them back."""
        for s, n in placement:
            self.gpus[s] -= sign * n
            self.total_gpus -= sign * n
            self.cpus[s] -= sign * n * cpus
            self.mem[s] -= sign * n * mem
        self._changed(s for s, _ in placement)

    def grant(self, key: int, where: tuple[tuple[int, int], ...], cpus: int,
              mem: float) -> Grant:
        """Take the room and hand out the grant for it."""
        self.take(where, cpus, mem)
        return Grant(key, where, cpus, mem)

    def can_grow(self, g: Grant, cpus: float, mem: float) -> bool:
        """Whether every server a placed job is on can give each of its GPUs there
        `cpus` more cores and `mem` more GB."""
        return all(self.cpus[s] + 1e-9 >= n * cpus and self.mem[s] + 1e-9 >= n * mem
                   for s, n in g.placement)

    def resize(self, g: Grant, cpus: int, mem: float) -> None:
        """Give a placed job other cores and memory per GPU, where it is."""
        for s, n in g.placement:
            self.cpus[s] -= n * (cpus - g.cpus)
            self.mem[s] -= n * (mem - g.mem_gb)
        g.cpus, g.mem_gb = cpus, mem
        self._changed(s for s, _ in g.placement)


Allocator = Callable[[Sequence[Want], Free], list[Grant]]


def _place_each(wants: Sequence[Want], free: Free, size: Callable[[Want], Config]) -> list[Grant]:
    grants = []
    for w in wants:
        c = size(w)
        where = free.first_fit(w.gpus, c.cpus, c.mem_gb)
        if where is not None:
            grants.append(free.grant(w.key, where, c.cpus, c.mem_gb))
    return grants


def proportional(wants: Sequence[Want], free: Free) -> list[Grant]:
    """Each job at its GPU-proportional share, first fit; a job that does not fit waits."""
    return _place_each(wants, free, lambda w: w.demands.share)


def greedy(wants: Sequence[Want], free: Free) -> list[Grant]:
    """Synergy-GREEDY: each job at its ideal demand, first fit; a job that does not fit waits."""
    return _place_each(wants, free, lambda w: w.demands.ideal)


def tune(wants: Sequence[Want], free: Free) -> list[Grant]:
    """Synergy-TUNE: each job at its ideal, else its fair share, else its share after taking
    back what jobs on its servers hold beyond theirs."""
    grants: list[Grant] = []
    on_server: list[list[Grant]] = [[] for _ in free.gpus]
    shares = {w.key: w.demands.share for w in wants}
    for w in wants:
        if w.gpus > free.total_gpus:
            continue
        d = w.demands
        # Synergy's "fair share": the share, unless the ideal is no bigger than it.
        fair = d.ideal if (d.ideal.cpus <= d.share.cpus and d.ideal.mem_gb <= d.share.mem_gb) \
            else d.share
        size = d.ideal
        where = free.first_fit(w.gpus, size.cpus, size.mem_gb)
        if where is None:
            size = fair
            where = free.first_fit(w.gpus, size.cpus, size.mem_gb)
        if where is None:
            _reclaim(w, fair, free, on_server, shares)
            where = free.first_fit(w.gpus, size.cpus, size.mem_gb)
        if where is None:
            continue
        g = free.grant(w.key, where, size.cpus, size.mem_gb)
        grants.append(g)
        for s, _ in where:
            on_server[s].append(g)
    return grants


def _reclaim(w: Want, fair: Config, free: Free, on_server: list[list[Grant]],
             shares: dict[int, Config]) -> None:
    """Synergy-TUNE's last resort: put jobs holding more than their share back to it,
    richest in cores first, until the new job's share fits. The servers are Synergy's:
    for a multi-GPU job the first with all its GPUs free; else the busiest servers that
    still have a free GPU, as many of the job's GPUs on each as it has free, each
    server asked for its part of the job's share."""
    servers = [s for s, n in enumerate(free.gpus) if n > 0]
    whole = [s for s in servers if free.gpus[s] >= w.gpus] if w.gpus > 1 else []
    if whole:
        parts = [(whole[0], w.gpus)]
    else:
        parts, left = [], w.gpus
        for s in sorted(servers, key=lambda s: (free.gpus[s], s)):
            parts.append((s, min(left, free.gpus[s])))
            left -= parts[-1][1]
            if not left:
                break
    for s, n in parts:
        _reclaim_on(s, n * fair.cpus, n * fair.mem_gb, free, on_server[s], shares)


def _reclaim_on(s: int, cpus: float, mem: float, free: Free, peers: list[Grant],
                shares: dict[int, Config]) -> None:
    need_c, need_m = max(0.0, cpus - free.cpus[s]), max(0.0, mem - free.mem[s])
    if need_c <= 1e-9 and need_m <= 1e-9:
        return
    for g in sorted(peers, key=lambda g: (len(g.placement), -g.cpus, -g.mem_gb)):
        share = shares[g.key]
        here = dict(g.placement)[s]
        excess_c = max(0.0, here * (g.cpus - share.cpus))
        excess_m = max(0.0, here * (g.mem_gb - share.mem_gb))
        if g.cpus > share.cpus or g.mem_gb > share.mem_gb:
            # Down to the share in what it has too much of; never up in the other.
            free.resize(g, min(g.cpus, share.cpus), min(g.mem_gb, share.mem_gb))
        need_c, need_m = max(0.0, need_c - excess_c), max(0.0, need_m - excess_m)
        if need_c <= 1e-9 and need_m <= 1e-9:
            return


def synergy_slurm(wants: Sequence[Want], free: Free) -> list[Grant]:
    """This project's policy: TUNE's placement, each job cut to its floor, then the spare
    given to whole ideals and step by step (to the claim, then to the ideal)."""
    grants = tune(wants, free)
    by_key, steps = {}, {}
    want = {w.key: w for w in wants}
    for g in grants:
        w = want[g.key]
        free.resize(g, w.demands.floor.cpus, w.demands.floor.mem_gb)
        by_key[g.key], steps[g.key] = (w, g), 0
    whole = _whole_ideals(by_key, free)
    rest = {k: v for k, v in by_key.items() if k not in whole}
    # Claims first (the site policy's fair share of the spare), then up to the ideal.
    for limit in ("claim", "ideal"):
        _upgrade(rest, steps, free, limit)
    return grants


def _whole_ideals(by_key: dict, free: Free) -> set[int]:
    """Whole ideals first, most speed per core (weighted) first, while they fit on the
    job's servers: the one step that pays whatever the speed between the floor and the
    ideal turns out to be (Synergy's simulator pays nothing short of the ideal). The
    spare that no ideal fits into is then handed out step by step."""
    jumps = []
    for key, (w, _) in by_key.items():
        d = w.demands
        to = Config(max(d.floor.cpus, d.ideal.cpus), max(d.floor.mem_gb, d.ideal.mem_gb),
                    d.ideal.rate)
        if to.rate > d.floor.rate + 1e-9:
            jumps.append((-_gain_per_core(w, d.floor, to), key, to))
    done = set()
    for _, key, to in sorted(jumps, key=lambda j: (j[0], j[1])):
        w, g = by_key[key]
        if free.can_grow(g, to.cpus - g.cpus, to.mem_gb - g.mem_gb):
            free.resize(g, to.cpus, to.mem_gb)
            done.add(key)
    return done


def _gain_per_core(w: Want, here: Config, to: Config) -> float:
    """The speed a move buys per core, memory priced at the share's cores per GB,
    weighted by the job's 1/remaining time."""
    d = w.demands
    return w.weight * (to.rate - here.rate) / max(
        (to.cpus - here.cpus) + (to.mem_gb - here.mem_gb) * d.share.cpus / d.share.mem_gb,
        1e-9)


def _upgrade(by_key: dict, steps: dict[int, int], free: Free, limit: str) -> None:
    """Greedy on marginal speed per core: repeatedly move the job whose next frontier
    step buys the most speed (x its GPUs) per core (memory priced at the share's ratio)
    and still fits on its servers. Spare capacity only shrinks, so a job's best step only
    gets worse: a heap re-checked on pop is exact."""
    def best_step(w: Want, g: Grant, at: int):
        """The job's best next frontier step within `limit` that fits where it is, as (gain per
        core, frontier index); None where there is none."""
        d = w.demands
        # The frontier starts at the floor, which may exceed the limit in one of the two.
        top = getattr(d, limit)
        cap_c, cap_m = max(top.cpus, d.floor.cpus), max(top.mem_gb, d.floor.mem_gb)
        here = d.frontier[at]
        best = None
        for j in range(at + 1, len(d.frontier)):
            nxt = d.frontier[j]
            if nxt.cpus > cap_c or nxt.mem_gb > cap_m + 1e-9:
                break
            if not free.can_grow(g, nxt.cpus - here.cpus, nxt.mem_gb - here.mem_gb):
                continue
            gain = _gain_per_core(w, here, nxt)
            if best is None or gain > best[0]:
                best = (gain, j)
        return best

    heap = []
    for key, (w, g) in by_key.items():
        step = best_step(w, g, steps[key])
        if step is not None:
            heap.append((-step[0], key, step[1]))
    heapq.heapify(heap)
    while heap:
        neg, key, j = heapq.heappop(heap)
        w, g = by_key[key]
        step = best_step(w, g, steps[key])
        if step is None:
            continue
        if step != (-neg, j):
            heapq.heappush(heap, (-step[0], key, step[1]))
            continue
        nxt = w.demands.frontier[j]
        free.resize(g, nxt.cpus, nxt.mem_gb)
        steps[key] = j
        step = best_step(w, g, j)
        if step is not None:
            heapq.heappush(heap, (-step[0], key, step[1]))
