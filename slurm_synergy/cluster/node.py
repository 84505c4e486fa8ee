"""Size the local cluster's one node from the real machine."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

# Memory kept back for the OS, the daemons and MariaDB: the larger of 1 GiB and 10%.
HEADROOM_MIN_MB = 1024
HEADROOM_FRACTION = 0.10
# Without hardware: file-backed GPUs of two types whose memory (the policy's catalog:
# 1 and 4 GiB) a built-in workload can outgrow on this machine, so that moving a job
# to the type that holds it is exercised for real.
FAKE_GPU_TYPES = (("local1g", 2), ("local4g", 2))
CGROUP_V1_CONTROLLERS = ("cpuset", "memory", "freezer")


@dataclass(frozen=True)
class NodeSpec:
    hostname: str
    address: str
    cpus: int
    memory_mb: int
    gpus: int
    gpus_real: bool
    gpu_files: tuple[str, ...] = field(default_factory=tuple)
    gpu_types: tuple[str, ...] = field(default_factory=tuple)     # one per file; "" untyped

    @property
    def gpu_tres(self) -> str:
        """AccountingStorageTRES's GPU part: sacct shows a type only if it is tracked."""
        types = dict.fromkeys(t for t in self.gpu_types if t)
        return ",".join(["gres/gpu", *(f"gres/gpu:{t}" for t in types)])

    @property
    def gres(self) -> str:
        """slurm.conf's Gres= for the node: gpu:TYPE:N per type, in file order."""
        counts: dict[str, int] = {}
        for t in self.gpu_types or ("",) * self.gpus:
            counts[t] = counts.get(t, 0) + 1
        return ",".join(f"gpu:{t}:{n}" if t else f"gpu:{n}" for t, n in counts.items())


def memory_mb(meminfo: str) -> int:
    """Schedulable memory: MemTotal from /proc/meminfo less the headroom."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) // 1024
            return total - max(HEADROOM_MIN_MB, int(total * HEADROOM_FRACTION))
    raise ValueError("no MemTotal line in /proc/meminfo")


def real_gpus() -> tuple[int, str]:
    """(count, type) from `nvidia-smi -L`; (0, "") when there is no NVIDIA GPU."""
    if shutil.which("nvidia-smi") is None:
        return 0, ""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0, ""
    names = [line.split(":", 1)[1].split("(")[0].strip() for line in out.splitlines()
             if line.startswith("GPU ")]
    if not names:
        return 0, ""
    # "NVIDIA H100 80GB HBM3" -> "h100": the gres type users write in --gres=gpu:h100:1.
    words = [w for w in names[0].lower().split() if w not in ("nvidia", "tesla", "geforce")]
    return len(names), (words[0] if words else "gpu")


def cgroup_mode(root: Path = Path("/sys/fs/cgroup")) -> str:
    """"v1" when Slurm's cgroup/v1 plugin can confine jobs here, else "none".

    Slurm 22.05's cgroup/v2 plugin needs slurmd started by systemd, which a local
    cluster started by hand is not, so a pure v2 host runs unconfined.
    """
    for ctl in CGROUP_V1_CONTROLLERS:
        probe = root / ctl / f"synergy-probe-{uuid.uuid4().hex[:8]}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError:
            return "none"
    return "v1"


def detect(state: Path) -> NodeSpec:
    hostname = socket.gethostname().split(".")[0]
    count, gpu_type = real_gpus()
    if count:
        files = tuple(f"/dev/nvidia{i}" for i in range(count))
        types, real = (gpu_type,) * count, True
    else:
        # GPUs without hardware: plain files, so Slurm schedules and accounts them for real.
        types = tuple(t for t, n in FAKE_GPU_TYPES for _ in range(n))
        count, real = len(types), False
        files = tuple(str(state / "dev" / f"gpu{i}") for i in range(count))
    return NodeSpec(
        hostname=hostname,
        address="127.0.0.1",
        cpus=os.cpu_count() or 1,
        memory_mb=memory_mb(Path("/proc/meminfo").read_text()),
        gpus=count,
        gpus_real=real,
        gpu_files=files,
        gpu_types=types,
    )
