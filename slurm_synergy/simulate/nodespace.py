"""Backfill's map of the nodes over time, for one pass of it: what each node holds from
`now` on in slurmctld's view. A running job holds its node until its time limit ends
(rounded up to bf_resolution), a job the pass starts until its own limit does, and a job
that cannot start now is given the earliest start at which it fits on one node for its
whole limit, a reservation later jobs of the pass must not delay.

Slurm keeps this map as a list of time points with the nodes free at each; here each
node's releases are a row of an array, so the earliest start over thousands of nodes is a
few array operations, and only the nodes that carry a reservation are walked one by one.
Sizes are (cores, MB, GPUs) triples.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

Triple = tuple[int, int, int]


_PAD = 5e8          # seconds past `now` given to a row's unused columns: past any limit
_ROW = 1e9          # seconds between rows when a subset's rows are laid end to end


class NodeSpace:
    """The map for one backfill pass at `now`, looking `window_s` ahead (bf_window)."""

    def __init__(self, caps: np.ndarray, held: Sequence[Sequence[tuple[float, Triple]]],
                 now: float, window_s: float):
        """`caps`: each node's (cores, MB, GPUs); `held[n]`: (planned end, size) of what runs
        on node n."""
        self.now, self.horizon = now, now + window_s
        self.caps = caps
        self.held = [list(h) for h in held]
        self.booked: dict[int, list[tuple[float, float, Triple]]] = {}
        width = 1 + max((len(h) for h in self.held), default=0)
        self.times = np.full((len(caps), width), math.inf)
        self.free = np.zeros((len(caps), width, 3), dtype=np.int64)
        for n in range(len(caps)):
            self._row(n)

    def _row(self, n: int) -> None:
        """Node n's free cores, MB and GPUs from each change on, in time order: each
        release of what runs, each start and end of a reservation."""
        changes: dict[float, np.ndarray] = {}
        for end, s in self.held[n]:
            changes[end] = changes.get(end, 0) + np.array(s)
        for start, end, s in self.booked.get(n, ()):
            changes[start] = changes.get(start, 0) - np.array(s)
            changes[end] = changes.get(end, 0) + np.array(s)
        at = sorted(changes)
        if len(at) + 1 > self.times.shape[1]:
            extra = len(at) + 1 - self.times.shape[1] + 4
            self.times = np.pad(self.times, ((0, 0), (0, extra)), constant_values=math.inf)
            self.free = np.pad(self.free, ((0, 0), (0, extra), (0, 0)), mode="edge")
        base = self.caps[n] - sum((np.array(s) for _, s in self.held[n]),
                                  np.zeros(3, dtype=np.int64))
        steps = np.cumsum([base, *(changes[t] for t in at)], axis=0)
        self.times[n, :] = math.inf
        self.times[n, 0] = self.now
        self.times[n, 1:len(at) + 1] = at
        self.free[n, :len(at) + 1] = steps
        self.free[n, len(at) + 1:] = steps[-1]

    def earliest(self, size: Triple, span_s: float, mask: np.ndarray) -> tuple[float, int]:
        """The earliest start (and its node, the first in order) at which `size` fits for
        `span_s` on one node of `mask` beside everything held; (inf, -1) where none does
        within the window."""
        fits = np.asarray((self.free >= np.asarray(size)).all(axis=2))
        ok = fits & (self.times <= self.horizon) & mask[:, None]
        has = ok.any(axis=1)
        if not has.any():
            return math.inf, -1
        # Where nothing is reserved, free only grows: the first fit holds for any span.
        at = np.where(has, self.times[np.arange(len(ok)), ok.argmax(axis=1)], math.inf)
        if not self.booked:
            n = int(at.argmin())
            return float(at[n]), n
        rows = np.fromiter(self.booked, dtype=np.int64)
        plain = at.copy()
        plain[rows] = math.inf
        best = float(plain.min())
        rows = rows[at[rows] <= best]
        at = plain
        if len(rows):
            at[rows] = self._earliest_in(rows, fits[rows], ok[rows], span_s)
        n = int(at.argmin())
        return (float(at[n]), n) if at[n] < math.inf else (math.inf, -1)

    def _earliest_in(self, rows: np.ndarray, fits: np.ndarray, ok: np.ndarray,
                     span_s: float) -> np.ndarray:
        """The earliest start on each of `rows` (nodes with reservations) at which the job
        fits at every change within its span."""
        rel = np.where(np.isfinite(self.times[rows]), self.times[rows] - self.now, _PAD)
        flat = (rel + _ROW * np.arange(len(rows))[:, None]).ravel()
        # a change past the horizon only releases: it cannot stop a job that fits before it
        good = (fits | (self.times[rows] > self.horizon)).ravel()
        last = np.searchsorted(flat, flat + span_s, side="left") - 1
        bad = np.concatenate(([0], np.cumsum(~good)))
        clear = (bad[last + 1] - bad[np.arange(len(flat))] == 0).reshape(ok.shape) & ok
        first = clear.argmax(axis=1)
        return np.where(clear.any(axis=1), self.times[rows, first], math.inf)

    def start(self, n: int, end: float, size: Triple) -> None:
        """A job the pass starts on node n now, held until `end`."""
        self.held[n].append((end, size))
        self._row(n)

    def reserve(self, n: int, start: float, end: float, size: Triple) -> None:
        """A job given node n from `start` to `end`: later jobs of the pass must not delay it."""
        self.booked.setdefault(n, []).append((start, end, size))
        self._row(n)
