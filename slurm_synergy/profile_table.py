"""Profiles for people: a table of what was measured, and throughput against cores."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from slurm_synergy.columns import aligned
from slurm_synergy.model.profile import Profile
from slurm_synergy.model.throughput import predict

JOB_HOUR_S = 3600.0


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _gpu_text(p: Profile) -> str:
    if not p.gpu.available:
        return "none: " + p.gpu.reason.split(" (")[0]     # the reason without NVML's detail
    if p.gpu.util_pct is None:
        return "no readings"
    power = (f", {p.gpu.avg_power_w:.0f} W" if p.gpu.avg_power_w is not None
             else ", no power reading")    # NVML reads none on some GPUs (a MIG slice)
    return f"{p.gpu.count}x {p.gpu.name}, {p.gpu.util_pct:.0f}% util{power}"


def rows(profiles: Sequence[Profile]) -> list[dict[str, str]]:
    """One row per profile, by column name: samples/s by cores, data stall, the model's
    per-sample core costs and held-out error, and what profiling cost (s)."""
    out = []
    for p in profiles:
        train = p.train_points()
        m = p.model
        out.append({
            "fingerprint": p.fingerprint,
            "job": p.job_name or p.command[0],
            "samples/s by cores": "  ".join(f"{pt.cores}c:{pt.samples_per_s:.1f}"
                                            + (f"±{pt.spread:.0%}" if pt.spread is not None
                                               else "") for pt in train)
            + (" (steps/s: no batch size seen)" if p.per_step else ""),
            "data stall": _pct(max(train, key=lambda t: t.cores).data_stall_fraction)
            if train else "-",
            "p core-ms": f"{m.prep_core_s * 1e3:.2f}",
            "h core-ms": f"{m.host_core_s * 1e3:.2f}",
            "model err (held out)": f"{_pct(m.mean_error)} mean, {_pct(m.max_error)} max"
            + (f" (noise {_pct(m.mean_noise)})" if m.mean_noise is not None else "")
            if m.held_out else "- (too few points)",
            "dataset MB": f"{m.fetch.dataset_mb:.0f}" if m.fetch else "-",
            "cost s": f"{p.profiling_s:.0f}",
            "of 1 h": f"{p.profiling_s / JOB_HOUR_S:.1%}",
            "gpu": _gpu_text(p),
        })
    return out


def profiles_table(profiles: Sequence[Profile]) -> str:
    """The profiles as an aligned table, for `synergy profiles`; "no profiles" without any."""
    data = rows(profiles)
    if not data:
        return "no profiles"
    cols = list(data[0])
    return aligned(cols, [[r[c] for c in cols] for r in data])


def markdown(profiles: Sequence[Profile]) -> str:
    """The profiles as a Markdown table without their fingerprints (the benchmark's write-up);
    "" without any."""
    data = rows(profiles)
    if not data:
        return ""
    cols = [c for c in data[0] if c != "fingerprint"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(r[c] for c in cols) + " |" for r in data]
    return "\n".join(lines)


def plot(profiles: Sequence[Profile], path: Path, max_cores: int = 16) -> Path:
    """Measured points and the model's curve per workload, each relative to its own
    1-core speed, so CPU-hungry and CPU-light workloads read at a glance."""
    import matplotlib
    matplotlib.use("Agg")          # no display on a cluster node
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    cores = list(range(1, max_cores + 1))
    for p in profiles:
        base = predict(p.model, 1)
        label = p.job_name or p.fingerprint
        curve = [predict(p.model, k) / base for k in cores]
        line, = ax.plot(cores, curve, "--", linewidth=1.2)
        pts = p.train_points()
        ax.plot([t.cores for t in pts], [t.samples_per_s / base for t in pts], "o",
                color=line.get_color(), label=f"{label} (measured, model dashed)")
    ax.set_xlabel("CPU cores (loader workers = cores - 1)")
    ax.set_ylabel("throughput / model at 1 core")
    ax.set_title("Throughput against cores: measured steps and the fitted model")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
