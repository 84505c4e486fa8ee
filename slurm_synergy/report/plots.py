"""The report's figures as PNG files: throughput against cores per workload with the
chosen allocation marked, the cluster's allocation over time, and GPU energy against run
time per power limit."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import pandas as pd  # noqa: E402

from slurm_synergy.model.engine import speed  # noqa: E402
from slurm_synergy.model.profile import Profile  # noqa: E402


def _empty(ax: plt.Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def save_figure(fig: plt.Figure, path: Path) -> Path:
    """Write the figure to `path` as a PNG (100 dpi) and close it; returns `path`."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def throughput(jobs: pd.DataFrame, profiles: dict[str, Profile], path: Path) -> Path:
    """Samples/s against cores per profiled workload: the model's curve, the measured points,
    and the cores its latest decided job got; returns the PNG's path."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if not profiles:
        _empty(ax, "no profiled workloads among these jobs")
    for fp, profile in sorted(profiles.items()):
        measured = {p.cores: p.samples_per_s for p in profile.train_points()}
        # The decision as the cluster applied it: the cores its latest decided job got.
        mine = jobs[(jobs["fingerprint"] == fp) & jobs["decided_cpus"].notna()
                    & jobs["start"].notna()]
        chosen = int(mine["alloc_cpus"].iloc[-1]) if len(mine) else None
        top = max([profile.allocation.cores, *measured, chosen or 1])
        cores = list(range(1, top + 1))
        mem = float(profile.allocation.mem_mb)
        try:
            rates = [speed(profile, measured, c, mem) for c in cores]
        except (ValueError, ArithmeticError):     # a model that cannot be drawn
            continue
        name = profile.job_name or fp
        line, = ax.plot(cores, rates, label=f"{name} (model)")
        ax.scatter(list(measured), list(measured.values()), color=line.get_color(), zorder=3)
        if chosen:
            ax.scatter([chosen], [rates[chosen - 1]], marker="*", s=220, color=line.get_color(),
                       edgecolor="black", zorder=4, label=f"{name}: decided, got {chosen} core(s)")
    ax.set_xlabel("CPU cores")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("samples/s")
    ax.set_title("Throughput against cores (dots measured, star as applied)")
    if profiles:
        ax.legend(fontsize=8)
        ax.set_ylim(bottom=0)
    return save_figure(fig, path)


def allocation_steps(jobs: pd.DataFrame) -> tuple[list, list[int], list[int]]:
    """Cores and GPUs held by running jobs after each start and end. Only jobs that held
    something for a while count: one that never started, or ended as it started, holds
    nothing (counting it drew a spike below zero)."""
    ran = jobs[jobs["start"].notna() & jobs["end"].notna()]
    ran = ran[ran["end"] > ran["start"]]
    held = list(zip(ran["start"], ran["end"], ran["alloc_cpus"], ran["gpus"]))
    # Events at one instant are summed into one step below, so only time orders them.
    events = sorted([(s, c or 0, g or 0) for s, _, c, g in held]
                    + [(e, -(c or 0), -(g or 0)) for _, e, c, g in held],
                    key=lambda e: e[0])
    times: list = []
    cores: list[int] = []
    gpus: list[int] = []
    c = g = 0
    for t, dc, dg in events:
        c, g = c + dc, g + dg
        if times and times[-1] == t:      # one job ends as the next starts: one step
            cores[-1], gpus[-1] = c, g
            continue
        times.append(t)
        cores.append(c)
        gpus.append(g)
    return times, cores, gpus


def allocation(jobs: pd.DataFrame, path: Path) -> Path:
    """Cores and GPUs held by running jobs over time (a step at each start and end)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    times, cores, gpus = allocation_steps(jobs)
    if not times:
        _empty(ax, "no job ran in this period")
    else:
        ax.step(times, cores, where="post", label="cores allocated")
        ax.step(times, gpus, where="post", label="GPUs allocated")
        ax.set_ylabel("held by running jobs")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        fig.autofmt_xdate()
    ax.set_title("Cluster allocation over time")
    return save_figure(fig, path)


def energy(jobs: pd.DataFrame, path: Path) -> Path:
    """GPU energy (kJ) against run time (min) per job, coloured by power limit; returns the
    PNG's path."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    measured = jobs[jobs["gpu_energy_j"].notna()]
    if measured.empty:
        _empty(ax, "no GPU energy measured for these jobs\n(no GPU, or no node epilog)")
    else:
        for limit, group in measured.groupby(measured["gpu_power_limit_w"].fillna(0)):
            label = f"{limit:.0f} W limit" if limit else "limit unknown"
            ax.scatter(pd.to_numeric(group["elapsed_s"]) / 60,
                       pd.to_numeric(group["gpu_energy_j"]) / 1000, label=label)
        ax.set_xlabel("run time, minutes")
        ax.set_ylabel("GPU energy, kJ")
        ax.legend(fontsize=8)
    ax.set_title("GPU energy against run time, per power limit")
    return save_figure(fig, path)
