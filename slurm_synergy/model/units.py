"""Slurm's units, one parser each: memory sizes, durations and GPU requests, as users
write them in a CSV row and as sacct, squeue and sinfo print them."""

from __future__ import annotations

import functools
import re

_MEM = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?n?$", re.IGNORECASE)
_MEM_SCALE = {"K": 1 / 1024, "M": 1.0, "": 1.0, "G": 1024.0, "T": 1024.0 ** 2}
_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")
# gpu, gpu:2, gpu:a100:4, gpu:a100:4(IDX:0-3), gres:gpu:1, gres/gpu:a100=1 is not this form.
_GPU_GRES = re.compile(r"\bgpu(?::([A-Za-z_][\w.-]*))?(?::(\d+))?(?=$|[,(\s])")


@functools.lru_cache(maxsize=4096)     # a report reads the same few sizes thousands of times
def mem_mb(text: str) -> float | None:
    """A memory size in MB: 4096 (MB), 4096M, 3G, 1.5G, 21304K, 16GiB; sacct's per-node
    ReqMem (4000Mn) too. None when it is not one (sacct's per-CPU 4000Mc is no total)."""
    match = _MEM.match(text.strip())
    if not match:
        return None
    return float(match.group(1)) * _MEM_SCALE[match.group(2).upper()]


@functools.lru_cache(maxsize=4096)
def duration_s(text: str) -> float | None:
    """sacct's durations, [DD-][HH:]MM:SS[.mmm], in seconds; None when not one."""
    match = _DURATION.match(text.strip())
    if not match:
        return None
    days, hours, minutes, secs = match.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(secs)


def gres_text(gpus: int, gpu_type: str = "") -> str:
    """--gres's value for `gpus` GPUs of `gpu_type` ("" = any type; "" for no GPUs)."""
    if not gpus:
        return ""
    return f"gpu:{gpu_type}:{gpus}" if gpu_type else f"gpu:{gpus}"


def gpu_count(gres: str) -> int:
    """GPUs in a gres list (gres:gpu:2, gpu:a100:4(IDX:0-3), gpu:0; gres:gpu is one)."""
    return sum(int(m.group(2) or 1) for m in _GPU_GRES.finditer(gres))


def gpu_types(gres: str) -> set[str]:
    """The GPU types a gres list names (gres:gpu:a100:1 -> {a100})."""
    return {m.group(1) for m in _GPU_GRES.finditer(gres) if m.group(1)}
