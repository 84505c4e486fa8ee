"""The optimal allocator: the round's largest total speed, fast enough for every round.

Synergy-OPT solves an integer program per round (up to 424 s for one round of 32 GPUs
with GLPK). The same problem, solved here in milliseconds:

    maximise  sum over jobs of GPUs x speed(cores, memory per GPU)
    so that   each job runs at least as fast as at its share (its floor),
              each server's cores, memory and GPUs hold what is placed on it.

1. Which jobs: the scheduling order's jobs while GPUs last (as Synergy-OPT).
2. A target for each: a dynamic programme over the cluster's spare cores, each job
   choosing one step of its frontier (floor .. ideal, made by the decision engine), with
   memory priced by a Lagrange multiplier bisected until the choices fit.
3. Where: largest first, each at its floor, onto the server whose cores or memory are
   least spoken for by the targets of the jobs already there.
4. How much, per server: exactly. The core programme alone where memory does not bind;
   where it does, a programme over cores that keeps every (memory, speed) pair no other
   beats in both (a price on memory can miss the optimum by far when memory comes in
   coarse steps).
5. Local search over placements: move a job to another server or swap it for up to
   three jobs there, while the two servers' optimum rises; a bounded number of tries.
Only step 5 is not exact: on 2-3 servers it was within 4% of `exact()` at worst.

`exact()` is the integer programme itself (scipy's HiGHS), for checking this on small
instances (tests, bench): it is the yardstick, not something to run every round.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from slurm_synergy.simulate.allocate import Free, Grant, Want

_NEG = -1e18


def _choose(wants: Sequence[Want], spare_cpus: int, price: float) -> list[int]:
    """Per job, the frontier step that maximises total GPUs x (rate - price x memory)
    with at most `spare_cpus` cores above the jobs' floors (each job at least its floor)."""
    best = np.zeros(spare_cpus + 1)
    picks = []
    for w in wants:
        steps = w.demands.frontier
        base = steps[0].cpus
        new = np.full(spare_cpus + 1, _NEG)
        arg = np.zeros(spare_cpus + 1, dtype=np.int16)
        for k, c in enumerate(steps):
            need = (c.cpus - base) * w.gpus
            if need > spare_cpus:
                break
            cand = np.full(spare_cpus + 1, _NEG)
            cand[need:] = best[:spare_cpus + 1 - need] + w.gpus * (c.rate - price * c.mem_gb)
            better = cand > new
            new[better] = cand[better]
            arg[better] = k
        picks.append(arg)
        best = new
    at = int(np.argmax(best))           # walk back from the best total
    chosen = [0] * len(wants)
    for i in range(len(wants) - 1, -1, -1):
        k = int(picks[i][at])
        chosen[i] = k
        steps = wants[i].demands.frontier
        at -= (steps[k].cpus - steps[0].cpus) * wants[i].gpus
    return chosen


def _pooled(wants: Sequence[Want], spare_cpus: int, mem: float) -> list[int]:
    """`_choose`, with memory priced up until the choices fit `mem`."""
    def used(ch):
        """The memory the choices take (GB), over every job's GPUs."""
        return sum(w.demands.frontier[k].mem_gb * w.gpus for w, k in zip(wants, ch))

    chosen = _choose(wants, spare_cpus, 0.0)
    if used(chosen) <= mem + 1e-9:
        return chosen
    lo, hi = 0.0, 1.0
    while used(fit := _choose(wants, spare_cpus, hi)) > mem + 1e-9:
        if hi > 1e6:
            return [0] * len(wants)
        lo, hi = hi, hi * 4
    for _ in range(12):
        mid = (lo + hi) / 2
        ch = _choose(wants, spare_cpus, mid)
        if used(ch) <= mem + 1e-9:
            fit, hi = ch, mid
        else:
            lo = mid
    return fit


def _runnable(wants: Sequence[Want], free: Free) -> list[Want]:
    """The scheduling order's jobs while GPUs last (as Synergy-OPT takes them)."""
    gpus, jobs = free.total_gpus, []
    for w in wants:
        if w.gpus <= gpus:
            jobs.append(w)
            gpus -= w.gpus
    return jobs


def optimal(wants: Sequence[Want], free: Free, memo: dict | None = None) -> list[Grant]:
    """`memo` keeps per-server optima between calls (a simulation passes one along)."""
    jobs = _runnable(wants, free)
    if not jobs:
        return []
    # How much: the pooled optimum, over the cores spare above the jobs' floors.
    spare = int(sum(free.cpus)) - sum(w.demands.floor.cpus * w.gpus for w in jobs)
    target = _pooled(jobs, max(0, spare), sum(free.mem))
    # Where: each job at its floor (that always fits beside floors), on the server whose
    # cores or memory, whichever is scarcer, are least spoken for by the targets of the
    # jobs already there.
    cap_c, cap_m = list(free.cpus), list(free.mem)
    load_c, load_m = [0.0] * len(cap_c), [0.0] * len(cap_c)
    grants: list = []
    on: list[list] = [[] for _ in free.gpus]
    for i in sorted(range(len(jobs)), key=lambda i: (
            -jobs[i].gpus, -jobs[i].demands.frontier[target[i]].cpus * jobs[i].gpus, i)):
        w, f = jobs[i], jobs[i].demands.floor
        t = w.demands.frontier[target[i]]
        want_c, want_m = t.cpus * w.gpus, t.mem_gb * w.gpus
        fits = free.whole(w.gpus, f.cpus, f.mem_gb)
        if fits:
            s = max(fits, key=lambda s: (min((cap_c[s] - load_c[s] - want_c) / cap_c[s],
                                             (cap_m[s] - load_m[s] - want_m) / cap_m[s]), -s))
            where: tuple[tuple[int, int], ...] = ((s, w.gpus),)
        else:
            found = free.first_fit(w.gpus, f.cpus, f.mem_gb)
            if found is None:
                continue
            where = found
        g = free.grant(w.key, where, f.cpus, f.mem_gb)
        grants.append(g)
        if len(where) == 1:
            on[where[0][0]].append(g)
            load_c[where[0][0]] += want_c
            load_m[where[0][0]] += want_m
    # How much, again, server by server (the exact optimum for the jobs each one holds),
    # after moving or swapping jobs between servers while that raises the total.
    # Each server's room: what is free once its whole jobs' floors are given back.
    jobs_of = {w.key: w for w in jobs}
    for here in on:
        for g in here:
            free.take(g.placement, g.cpus, g.mem_gb, sign=-1)
    room_g, room_c, room_m = list(free.gpus), list(free.cpus), list(free.mem)
    members = [[jobs_of[g.key] for g in here] for here in on]
    memo = {} if memo is None else memo
    _improve(members, room_g, room_c, room_m, memo)
    grants = [g for g in grants if len(g.placement) > 1]
    for s, ws in enumerate(members):
        for w, k in zip(ws, _server_best(ws, room_c[s], room_m[s], memo)[1]):
            c = w.demands.frontier[k]
            grants.append(free.grant(w.key, ((s, w.gpus),), c.cpus, c.mem_gb))
    return grants


def _server_best(ws: Sequence[Want], cpus: float, mem: float,
                 memo: dict | None = None) -> tuple[float, list[int]]:
    """The best total GPUs x rate for the jobs `ws` on one server of this much room.
    Servers and jobs repeat, so answers are kept in `memo` by what they depend on."""
    if not ws:
        return 0.0, []
    order = sorted(range(len(ws)), key=lambda i: (ws[i].work.name, ws[i].gpus))
    key = (tuple((ws[i].work.name, ws[i].gpus) for i in order), cpus, mem)
    if memo is not None and key in memo:
        value, sorted_steps = memo[key]
    else:
        spare = int(cpus + 1e-9) - sum(w.demands.floor.cpus * w.gpus for w in ws)
        if spare < 0 or mem + 1e-9 < sum(w.demands.floor.mem_gb * w.gpus for w in ws):
            value, sorted_steps = -1.0, [0] * len(ws)
        else:
            jobs = [ws[i] for i in order]
            sorted_steps = _choose(jobs, spare, 0.0)
            if sum(w.demands.frontier[k].mem_gb * w.gpus
                   for w, k in zip(jobs, sorted_steps)) <= mem + 1e-9:
                value = sum(w.gpus * w.demands.frontier[k].rate
                            for w, k in zip(jobs, sorted_steps))
            else:   # memory binds: a price on it can leave a gap, so solve it exactly
                value, sorted_steps = _exact_server(jobs, cpus, mem)
        if memo is not None:
            memo[key] = (value, sorted_steps)
    steps = [0] * len(ws)
    for i, k in zip(order, sorted_steps):
        steps[i] = k
    return value, steps


def _exact_server(ws: Sequence[Want], cpus: float, mem: float) -> tuple[float, list[int]]:
    """The exact optimum for one server: a dynamic programme over the jobs, keeping for
    each number of cores used only the (memory, value) pairs no other pair beats in both.
    Used where memory binds, which is where the priced programme can fall short."""
    cap_c = int(cpus + 1e-9)
    # states: cores used -> [(memory used, value, steps so far)], memory ascending and
    # value strictly rising: the Pareto front for that many cores.
    states: dict[int, list[tuple[float, float, tuple[int, ...]]]] = {0: [(0.0, 0.0, ())]}
    for w in ws:
        nxt: dict[int, list[tuple[float, float, tuple[int, ...]]]] = {}
        for c0, front in states.items():
            for k, step in enumerate(w.demands.frontier):
                c = c0 + step.cpus * w.gpus
                if c > cap_c:
                    break
                for m0, v0, ks in front:
                    m = m0 + step.mem_gb * w.gpus
                    if m <= mem + 1e-9:
                        nxt.setdefault(c, []).append((m, v0 + w.gpus * step.rate, ks + (k,)))
        states = {}
        for c in sorted(nxt):       # fewer cores first: a state must beat all cheaper ones
            kept: list = []
            for m, v, ks in sorted(nxt[c], key=lambda t: (t[0], -t[1])):
                if v > (kept[-1][1] if kept else -1.0) + 1e-12:
                    kept.append((m, v, ks))
            # Drop what a state with fewer cores already beats (no more memory, as fast).
            kept = [t for t in kept if t[1] > _best_within(states, t[0]) + 1e-12]
            if kept:
                states[c] = kept
    if not states:
        return -1.0, [0] * len(ws)
    _, v, ks = max((t for front in states.values() for t in front), key=lambda t: t[1])
    return v, list(ks)


def _best_within(states: dict, mem: float) -> float:
    """The best value among kept states using no more than `mem` memory."""
    best = -1.0
    for front in states.values():
        for m, v, _ in front:
            if m > mem + 1e-12:
                break
            best = max(best, v)
    return best


def _improve(members: list[list[Want]], room_g, room_c, room_m, memo: dict,
             budget: int = 400) -> None:
    """Local search: move a job to another server, or swap it for up to three jobs there
    (whatever the two servers' GPUs allow), whenever the two servers' optimum rises. At
    most `budget` tries a round, so a round of 512 GPUs stays fast; small instances are
    searched to the end."""
    value = [_server_best(ws, room_c[s], room_m[s], memo)[0] for s, ws in enumerate(members)]
    improved = True
    while improved and budget > 0:
        improved = False
        for s in range(len(members)):
            for w in list(members[s]):
                if len(w.demands.frontier) == 1 and not any(
                        len(v.demands.frontier) > 1 for v in members[s]):
                    continue      # nothing on this server gains from the room it leaves
                free_s = room_g[s] - sum(x.gpus for x in members[s])   # until w moves
                for t in range(len(members)):
                    if t == s or budget <= 0:
                        continue
                    free_t = room_g[t] - sum(x.gpus for x in members[t])
                    for back in _exchanges(members[t]):
                        give = sum(v.gpus for v in back)
                        if free_t + give < w.gpus or free_s + w.gpus < give:
                            continue
                        budget -= 1
                        new_s = [x for x in members[s] if x is not w] + list(back)
                        new_t = [x for x in members[t] if x not in back] + [w]
                        vs = _server_best(new_s, room_c[s], room_m[s], memo)[0]
                        vt = _server_best(new_t, room_c[t], room_m[t], memo)[0]
                        if vs >= 0 and vt >= 0 and vs + vt > value[s] + value[t] + 1e-6:
                            members[s], members[t] = new_s, new_t
                            value[s], value[t] = vs, vt
                            improved = True
                            break
                    if w not in members[s]:
                        break


def _exchanges(there: list[Want]):
    """What may come back from a server in exchange for a job: nothing, or up to three
    of its jobs (a 4-GPU job for a 2-GPU and two 1-GPU ones)."""
    for n in range(4):
        yield from itertools.combinations(there, n)


def exact(wants: Sequence[Want], free: Free) -> tuple[float, dict[int, tuple[int, int]]]:
    """The integer programme over (job, server, frontier step), for small instances: the
    largest total GPUs x rate with every chosen job placed whole on one server. Jobs are
    taken in order while GPUs last, as `optimal` takes them. Returns the objective and,
    per job key, (server, step)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    jobs = _runnable(wants, free)
    servers = range(len(free.gpus))
    var = [(i, s, k) for i, w in enumerate(jobs) for s in servers
           for k in range(len(w.demands.frontier))]
    col = {v: n for n, v in enumerate(var)}
    value = np.array([jobs[i].gpus * jobs[i].demands.frontier[k].rate for i, s, k in var])
    rows, lo, hi = [], [], []

    def row(entries, low, high):
        """Add one constraint: `low` <= sum of coef * variable over `entries` <= `high`."""
        r = np.zeros(len(var))
        for n, coef in entries:
            r[n] = coef
        rows.append(r)
        lo.append(low)
        hi.append(high)

    for i, w in enumerate(jobs):      # each job exactly once
        row([(col[i, s, k], 1.0) for s in servers for k in range(len(w.demands.frontier))],
            1, 1)
    for s in servers:
        here = [(i, k) for i, w in enumerate(jobs) for k in range(len(w.demands.frontier))]
        row([(col[i, s, k], jobs[i].gpus) for i, k in here], 0, free.gpus[s])
        row([(col[i, s, k], jobs[i].gpus * jobs[i].demands.frontier[k].cpus)
             for i, k in here], 0, free.cpus[s])
        row([(col[i, s, k], jobs[i].gpus * jobs[i].demands.frontier[k].mem_gb)
             for i, k in here], 0, free.mem[s])
    res = milp(-value, constraints=LinearConstraint(np.array(rows), lo, hi),
               integrality=np.ones(len(var)), bounds=Bounds(0, 1))
    if res.x is None:
        raise ValueError(f"the exact solver found no placement: {res.message}")
    placed = {jobs[i].key: (s, k) for (i, s, k), x in zip(var, res.x) if x > 0.5}
    return -float(res.fun), placed
