"""The workload key of a plain batch script: what etc/job_submit.lua computes at
submission for a job that `synergy submit` did not write, so that its decisions, profile
and accounting join up as a CSV row's fingerprint does.

Two jobs share a key when the same user submits the same script, its comments (the
#SBATCH lines among them) and spacing aside, with the same arguments, from the same
folder, with the same GPUs, task count and partition: a sweep's resubmissions, an
array's tasks, the job again next week. Cores, memory, time and names are not in it:
those are what a decision changes, or do not change the workload. A config file edited
under an unchanged script keeps the key; the run itself tells (probe/cmdfiles.py).

The hash is two polynomial hashes modulo primes below 2**31, so that Lua 5.1, which has
only doubles and no bit operations, computes it exactly and in a few milliseconds for
the largest script keyed; both key tests/contract_cases.toml's scripts alike
(tests/unit/test_contract_cases.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KEY_VERSION = "synergy-plain-1"
# The most a key hashes, its script (normalised), arguments and folder in all: a job past
# it is not keyed (left alone), since hashing runs inside slurmctld's locks and would hold
# up every submission behind it. A script longer than four times this is not even
# normalised.
KEY_BUDGET = 65536
MODULI = ((131, 2147483647), (137, 2147483629))     # (base, prime) of its two polynomial hashes
_SPACE = re.compile(rb"[ \t\n\v\f\r]+")     # C's isspace, as Lua's %s


@dataclass(frozen=True)
class PlainJob:
    """What the shim sees of a batch job at submission, as asked."""

    uid: int
    script: str
    args: tuple[str, ...] = ()      # the script's arguments (argv after the script)
    work_dir: str = ""
    partition: str = ""             # as asked; "" for the default
    gres: str = ""                  # tres_per_node as asked, e.g. gres:gpu:a100:2
    tasks: str = ""                 # --ntasks as asked; "" when not set


def normalised(script: bytes) -> bytes:
    """The script less its comment lines (#SBATCH ones among them) and blank lines, each
    line's spacing squeezed to single spaces. Bytes: slurmctld hands the shim bytes."""
    lines = (_SPACE.sub(b" ", line).strip(b" ") for line in script.split(b"\n"))
    return b"\n".join(line for line in lines if line and not line.startswith(b"#"))


def _hash(data: bytes) -> str:
    parts = []
    for base, modulus in MODULI:
        h = 0
        for byte in data:
            h = (h * base + byte) % modulus
        parts.append(f"{h:08x}")
    return "".join(parts)


def plain_key(job: PlainJob) -> str | None:
    """The job's 16-hex-digit key; None where what it would hash is past KEY_BUDGET."""
    raw = job.script.encode("utf-8", "surrogateescape")
    if len(raw) > 4 * KEY_BUDGET:
        return None
    # 22.05's gres:gpu:1 whichever release spelled it (gres/gpu:1 from 23.02): a workload
    # keeps its key across an upgrade.
    gres = job.gres.replace("gres/", "gres:")
    fields = (KEY_VERSION, str(job.uid), job.work_dir, job.partition, gres, job.tasks,
              *job.args)
    data = b"\0".join([*(f.encode("utf-8", "surrogateescape") for f in fields), normalised(raw)])
    return _hash(data) if len(data) <= KEY_BUDGET else None
