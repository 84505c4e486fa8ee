"""Before any step: would the job's own GPU hold the step?

A step that would not is not run: on a real GPU it would run out of memory, and with it
the whole first run of the workload. The job is submitted again on the type the GPU-fit
rule picks (model/gpufit.py), and profiled there. The check never stops a profile it
cannot make: an untyped request, a type missing from the catalog, a faulty catalog or
a controller that does not answer leave the steps to run as they would have.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.model.comment import GRES_TYPE
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.gpufit import estimated_need, fit_need, needed_mib
from slurm_synergy.model.gpus import Catalog
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.profile import GpuMemory
from slurm_synergy.model.units import gpu_types
from slurm_synergy import paths
from slurm_synergy.slurm import node_shape
from slurm_synergy.slurm import Slurm

_GRES_TYPE = re.compile(GRES_TYPE)


@dataclass(frozen=True)
class GpuMove:
    gpu_type: str               # where the job goes
    from_type: str              # the type it asked for, which would not hold the step
    reason: str


class MoveGpu(SynergyError):
    """The job's GPU would not hold the step: no step ran, the job moves."""

    def __init__(self, move: GpuMove) -> None:
        super().__init__(move.reason)
        self.move = move


def check_room(estimate: GpuMemory, job_id: str, partition: str, slurm: Slurm,
               policy: Policy, catalog: Catalog) -> tuple[GpuMove | None, str]:
    """The move when the job's type is known not to hold the step, else None and why the
    steps run here; the GPU types as the site's `catalog` gives them."""
    need, source = estimated_need(estimate)
    if need is None:
        return None, source
    try:
        asked = gpu_types(slurm.gres(job_id))
        if len(asked) != 1:
            return None, "the job names no one GPU type"
        (own,) = asked
        if own not in catalog.types:
            return None, f"{own} is not in the GPU catalog ({catalog.problem or 'no entry'})"
        room = catalog.types[own].memory_mib
        if needed_mib(need, policy) <= room:
            return None, f"{own} ({room} MiB) holds it"
        fit = fit_need(need, source, estimate, node_shape(slurm, partition or None).gpu_types,
                       policy, catalog)
    except SynergyError as e:
        return None, f"the check could not be made ({e})"
    if fit.gpu_type is None or fit.gpu_type == own:
        return None, fit.reason
    return GpuMove(fit.gpu_type, own, fit.reason), ""


def write_move(workdir: Path, move: GpuMove) -> Path:
    """Write the move into the job's working folder (paths.MOVE_FILE), for its resubmission;
    returns the file."""
    path = workdir / paths.MOVE_FILE
    atomic_write_text(path, json.dumps(asdict(move), sort_keys=True) + "\n")
    return path


def read_move(path: Path) -> GpuMove:
    """The move the profiler wrote; SynergyError where it is not one or names no GPU type."""
    try:
        move = GpuMove(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as e:
        raise SynergyError(f"{path} is not a GPU move written by the profiler ({e})") from None
    if not isinstance(move.gpu_type, str) or not _GRES_TYPE.fullmatch(move.gpu_type):
        raise SynergyError(f"{path}: {move.gpu_type!r} is not a GPU type")
    return move
