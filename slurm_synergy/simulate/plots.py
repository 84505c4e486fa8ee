"""The simulation's figures: JCT distribution per policy, and GPU and CPU use over time."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from slurm_synergy.report.plots import save_figure  # noqa: E402
from slurm_synergy.simulate.results import Window, measured  # noqa: E402
from slurm_synergy.simulate.simulator import Outcome  # noqa: E402


def jct_cdf(outcomes: Sequence[Outcome], path: Path, window: Window | None = None) -> Path:
    """The CDF of job completion time (h) per setup, over the window's jobs where given;
    returns the PNG's path."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for o in outcomes:
        jct = np.sort([(j.finished_s - j.arrival_s) / 3600 for j in measured(o.jobs, window)])
        ax.step(jct, np.arange(1, len(jct) + 1) / len(jct), where="post", label=o.setup.label)
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs" + (f" {window[0]}-{window[1]}" if window else ""))
    ax.set_title(f"JCT, {outcomes[0].setup.speed} speed model")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def utilisation(outcomes: Sequence[Outcome], path: Path) -> Path:
    """The share of the cluster's GPUs held and cores allocated in each round, per setup;
    returns the PNG's path."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for o in outcomes:
        t = (np.array(o.rounds.start_s) - o.rounds.start_s[0]) / 3600
        top.step(t, np.array(o.rounds.gpus) / o.cluster.gpus, where="post", label=o.setup.label)
        bottom.step(t, np.array(o.rounds.cpus) / o.cluster.cpus, where="post")
    top.set_ylabel("GPUs held")
    bottom.set_ylabel("cores allocated")
    bottom.set_xlabel("hours since the first round")
    for ax in (top, bottom):
        ax.set_ylim(0, 1.05)
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        ax.grid(alpha=0.3)
    top.legend(fontsize=8)
    top.set_title(f"cluster use per round, {outcomes[0].cluster.name}")
    return save_figure(fig, path)


def write(outcomes: Sequence[Outcome], out: Path, window: Window | None = None) -> list[Path]:
    """Both figures in `out` (jct.png, utilisation.png); returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    return [jct_cdf(outcomes, out / "jct.png", window),
            utilisation(outcomes, out / "utilisation.png")]
