"""The chains of jobs: which profiled job was resubmitted, right-sized, as which job.

One JSON line per resubmission in chains.jsonl, in the user's synergy home, per cluster
(paths.cluster_dir). The resubmission writes it; the report and `synergy plugin chains`
read it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from slurm_synergy import paths
from slurm_synergy.fileio import append_private, locked, private_folder
from slurm_synergy.model.errors import SynergyError


@dataclass(frozen=True)
class ChainLink:
    fingerprint: str
    job_name: str
    profiled_job: str
    resubmitted_job: str
    mode: str                   # shim: slurmctld's shim decided; user: this command did
    decision: str               # the decision's summary in user mode ("" under the shim)
    at: float


def chains_path(cluster: str) -> Path:
    """The cluster's chains.jsonl, in the user's synergy home."""
    return paths.cluster_dir(cluster) / "chains.jsonl"


def record(link: ChainLink, path: Path | None = None) -> None:
    """Append one resubmission to the chains (by default the current cluster's), under its lock."""
    path = path or chains_path(paths.job_cluster())
    private_folder(path.parent)
    with locked(path.with_suffix(".lock")):
        append_private(path, json.dumps(asdict(link), sort_keys=True) + "\n")


def read_chains(cluster: str, path: Path | None = None) -> list[ChainLink]:
    """The chains of jobs of `cluster` (slurm.Slurm.cluster_name)."""
    path = path or chains_path(cluster)
    if not path.exists():
        return []
    links = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        try:
            links.append(ChainLink(**json.loads(line)))
        except (ValueError, TypeError) as e:
            if number == len(lines):
                break           # a record being appended right now
            raise SynergyError(f"{path} line {number} is not a chain record ({e})") from None
    return links
