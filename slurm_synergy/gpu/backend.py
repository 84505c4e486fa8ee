"""Choosing the backend for this node, and finding a job's GPUs in it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence

from slurm_synergy.gpu.device import Gpu


@dataclass
class Backend:
    """The GPUs of one node. `reason` says why there are none; '' when there are.

    `broken`: the node has NVIDIA GPUs but they cannot be reached (NVML fails for a reason
    other than a missing driver), so nothing about their limits can be confirmed.
    """

    name: str
    gpus: list[Gpu] = field(default_factory=list)
    reason: str = ""
    broken: bool = False

    def find(self, ids: Sequence[str]) -> tuple[list[Gpu], list[str]]:
        """The GPUs named by `ids` (minor number, UUID or PCI bus id) and the ids not found.

        Slurm's SLURM_JOB_GPUS holds device numbers: the N of the /dev/nvidiaN files in
        gres.conf, which NVML reports as the minor number, not as its own index.
        """
        found: list[Gpu] = []
        missing: list[str] = []
        for raw in ids:
            key = raw.strip()
            if not key:
                continue
            match = next((g for g in self.gpus if _matches(g, key)), None)
            if match is None:
                missing.append(key)
            elif match not in found:
                found.append(match)
        return found, missing


def _matches(gpu: Gpu, key: str) -> bool:
    info = gpu.info
    if key.isdigit():
        return info.minor == int(key)
    if key.upper().startswith(("GPU-", "MIG-")):
        return info.uuid.upper() == key.upper()
    return _pci(info.pci_bus_id) == _pci(key)


def _pci(bus_id: str) -> str:
    """NVML writes 00000000:17:00.0, lspci and sysfs 0000:17:00.0: compare the tail."""
    head, _, device = bus_id.strip().lower().rpartition(":")
    domain, _, bus = head.rpartition(":")
    try:
        return f"{int(domain or '0', 16):x}:{bus}:{device}"
    except ValueError:      # not a bus id at all: it can only match itself
        return bus_id.strip().lower()


def job_gpu_ids(env: dict[str, str]) -> list[str]:
    """The job's GPUs as Slurm names them to a prolog or epilog.

    CUDA_VISIBLE_DEVICES is deliberately not read: outside the job's cgroup it is not the
    job's view of the devices.
    """
    return [x for x in env.get("SLURM_JOB_GPUS", "").split(",") if x.strip()]


def open_backend(env: dict[str, str] | None = None) -> Backend:
    """NVML when its library and driver answer; otherwise none, with the reason.

    SYNERGY_GPU_BACKEND=none turns GPU handling off on a node whatever it has.
    """
    env = dict(os.environ) if env is None else env
    if env.get("SYNERGY_GPU_BACKEND", "").strip().lower() == "none":
        return Backend("none", reason="no GPUs on this node (SYNERGY_GPU_BACKEND=none)")
    from slurm_synergy.gpu import nvml
    return nvml.open_nvml()
