"""Backfill's node map: the earliest start it gives a job, against a plain scan of every
moment something changes on every node, over random maps with reservations."""

import math
import random

import numpy as np

from slurm_synergy.simulate.nodespace import NodeSpace

NOW, WINDOW = 1000.0, 3600.0


def scan(caps, held, booked, size, span, mask):
    """The earliest (start, node) by brute force: every change on every node a candidate."""
    best = (math.inf, -1)
    for n, cap in enumerate(caps):
        if not mask[n]:
            continue
        holds = [(NOW, end, s) for end, s in held[n]] + booked.get(n, [])
        changes = sorted({NOW, *(e for _, e, _ in holds), *(s for s, _, _ in holds)})
        for at in changes:
            if at < NOW or at > NOW + WINDOW:
                continue
            points = [p for p in changes if at <= p < at + span]
            if all(all(cap[r] - sum(h[r] for s, e, h in holds if s <= p < e) >= size[r]
                       for r in range(3)) for p in points):
                best = min(best, (at, n))
                break
    return best


def test_the_earliest_start_is_the_scans_on_random_maps():
    rng = random.Random(3)
    for _ in range(300):
        nodes = rng.randint(1, 6)
        caps = np.array([(8, 64, 4)] * nodes, dtype=np.int64)
        held = [[(NOW + rng.choice([60, 120, 600, 1800, 7200]), (rng.randint(0, 3),
                  rng.randint(0, 20), rng.randint(0, 1))) for _ in range(rng.randint(0, 3))]
                for _ in range(nodes)]
        space = NodeSpace(caps, held, NOW, WINDOW)
        booked: dict[int, list] = {}
        mask = np.array([rng.random() < 0.9 for _ in range(nodes)])
        for _ in range(rng.randint(0, 6)):
            size = (rng.randint(1, 6), rng.randint(1, 40), rng.randint(0, 3))
            span = rng.choice([60.0, 300.0, 900.0, 4000.0])
            want = scan(caps, held, booked, size, span, mask)
            got = space.earliest(size, span, mask)
            assert got == want, (size, span, held, booked)
            if got[1] >= 0 and got[0] > NOW:
                space.reserve(got[1], got[0], got[0] + span, size)
                booked.setdefault(got[1], []).append((got[0], got[0] + span, size))
            elif got[1] >= 0:
                space.start(got[1], NOW + span, size)
                held[got[1]].append((NOW + span, size))
