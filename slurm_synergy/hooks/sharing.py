"""Whether a job holds its GPUs whole: a power limit is a board's, so a job's own limit is
set only on a board no other job can be on. A board is shared (and stays at its ceiling):
- through MIG (NVML says so: gpu/nvml.py);
- through gres/mps: slurmd gives an MPS job's prolog CUDA_MPS_ACTIVE_THREAD_PERCENTAGE;
- through gres/shard: nothing in the prolog's environment tells a shard job from a whole
  GPU's (read from Slurm's gres_shard.c), so a node whose slurm.conf gives it shards (or
  MPS) never sets a job's limit on any of its boards;
- with another job of this node holding the same board now (its prolog record is here):
  whatever the configuration says, the board then goes back to its ceiling.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from slurm_synergy.hooks.records import PrologRecord, RecordError, read_prolog

MPS_VARIABLE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
SHARING_GRES = ("shard", "mps")
_INCLUDE_DEPTH = 4


def hostnames(expr: str) -> list[str]:
    """A Slurm host list (node[1-3,07],gpu1) as names; an expression it cannot read is
    itself, one name."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,\[]*", expr):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                out.append(part)
                break
            for n in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{str(n).zfill(len(lo))}{suffix}")
    return out


def _conf_lines(conf: Path, depth: int = 0) -> Iterable[str]:
    """slurm.conf's lines, its Include files' in their place."""
    try:
        text = conf.read_text(errors="replace")
    except OSError:
        return
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        key, _, rest = line.partition(" ")
        if key.lower() == "include" and depth < _INCLUDE_DEPTH:
            path = Path(rest.strip())
            yield from _conf_lines(path if path.is_absolute() else conf.parent / path,
                                   depth + 1)
        elif line:
            yield line


def node_gres(conf: Path, node: str) -> str:
    """The Gres= slurm.conf gives `node` ("" where none, or the file cannot be read)."""
    for line in _conf_lines(conf):
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        names = next((v for k, v in fields.items() if k.lower() == "nodename"), None)
        if names and node in hostnames(names):
            return next((v for k, v in fields.items() if k.lower() == "gres"), "")
    return ""


def shared_by_setting(env: dict[str, str], node: str) -> str:
    """Why this job's boards may be shared by what Slurm says of the job or its node ("":
    they are not): MPS, or a node with shards or MPS in its Gres."""
    if env.get(MPS_VARIABLE):
        return f"an MPS job ({MPS_VARIABLE} is set)"
    conf = env.get("SLURM_CONF")
    if conf:
        gres = node_gres(Path(conf), node)
        sharing = [g for g in SHARING_GRES if re.search(rf"(^|,){g}(:|,|$)", gres)]
        if sharing:
            return f"this node's boards are shared (slurm.conf Gres={gres})"
    return ""


def other_holders(run_dir: Path, job_id: str, node: str, uuids: Iterable[str]
                  ) -> dict[str, str]:
    """Each of `uuids` that another job of this node holds now (its prolog record, which
    its epilog removes, lists it) -> that job's id."""
    wanted, held = set(uuids), {}
    for path in run_dir.glob(f"*.{node}.prolog.json"):
        other = path.name.split(".", 1)[0]
        if other == job_id:
            continue
        try:
            record: PrologRecord = read_prolog(path)
        except RecordError:
            continue
        for g in record.gpus:
            if g.uuid in wanted:
                held[g.uuid] = other
    return held
