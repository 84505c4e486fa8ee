"""The job spec: one validated CSV row, the record every later stage works from."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from slurm_synergy.model.comment import job_comment
from slurm_synergy.model.options import without
from slurm_synergy.model.units import gres_text

# The built-in trainer's models and the kind of data each reads (profiler/models.py
# MODELS and DATA_KINDS; a unit test keeps them equal). Listed here so that validating a
# CSV does not import torch.
BUILTIN_DATA_KIND = {"resnet": "jpeg", "mobilenet": "jpeg", "alexnet": "jpeg",
                     "transformer": "text", "lstm": "text", "m5": "audio"}
BUILTIN_ARCHS = tuple(BUILTIN_DATA_KIND)
# The built-in trainer's options that change the generated data, and those that change
# the workload's cost per sample (so its profile): pass-through args otherwise do not.
BUILTIN_DATA_OPTIONS = ("--dataset-size", "--image-size", "--clip-seconds")
BUILTIN_SHAPE_OPTIONS = BUILTIN_DATA_OPTIONS + ("--crop", "--seq-len", "--audio-crop")
BUILTIN_SCRIPT = "builtin:train"
SYNTHETIC_DATASET = "synthetic"
LOADERS = ("pytorch", "dali")
LAUNCHES = ("python", "torchrun")


def torchrun_argv(python: str, procs: int, script: str) -> list[str]:
    """A script started as `procs` DDP ranks on this node: how jobs and profiling steps
    alike launch a row whose launcher is torchrun."""
    return [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(procs), script]


def script_digest(script: str | Path) -> str:
    """A script's identity is its content: a copy elsewhere is the same workload, an
    edited one is not."""
    path = Path(script)
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return f"unreadable:{path}"


def workload_key(script: str | Path, args: Sequence[str], gpus: int, procs: int) -> dict:
    """What identifies a user's script as a workload, before hashing: its content, the
    arguments it gets (less the worker count, which is what gets tuned), its GPUs and
    processes."""
    key: dict = {"script": script_digest(script), "args": list(args), "gpus": gpus}
    if procs != 1:
        key["procs"] = procs
    return key


@dataclass(frozen=True)
class RowRef:
    """Where a spec came from: the CSV file and the row (1 = first data row) and line."""

    file: str
    row: int
    line: int

    def __str__(self) -> str:
        return f"{self.file} row {self.row} (line {self.line})"


@dataclass(frozen=True)
class HetPart:
    """One GPU type of a job over two (a component of a Slurm heterogeneous job), as
    the planner split it: its GPUs, and each one's batch, micro-batches and power limit."""

    gpu_type: str
    gpus: int
    batch: int                  # samples per GPU per step
    micro_batch: int            # the largest micro-batch
    accumulation: int           # micro-batches per step
    power_limit_w: int
    trace: str                  # the measured points it was planned from


@dataclass(frozen=True)
class JobSpec:
    name: str
    script: str                 # BUILTIN_SCRIPT or an absolute path
    arch: str
    depth: int | None
    batch: int
    workers: int
    dataset: str                # SYNTHETIC_DATASET or an absolute path
    gpus: int
    gpu_type: str               # "" = any type
    cpus: int
    mem_mb: int
    time: str
    partition: str              # "" = the cluster's default
    iterations: int | None
    epochs: int | None
    loader: str
    args: tuple[str, ...]
    output_folder: str          # relative to the submission's output folder
    port: int | None
    submit_interval_s: float
    source: RowRef
    row_digest: str             # hash of the row's cells: the ledger's identity of the row
    pinned: tuple[str, ...] = ()  # resources the row sets itself (cpus, mem, gpus)
    # A user's script: the options its row's columns give it (only those it declares),
    # every spelling of a worker count it declares (none: the probe sets the workers),
    # and how it is launched.
    script_options: tuple[str, ...] = ()
    workers_options: tuple[str, ...] = ()
    workers_given: bool = False
    launch: str = "python"
    procs: int = 1
    watch: bool | None = None   # record throughput during the run; None = site policy
    # A job over two GPU types: one part per type, `batch` being the global batch; such a
    # job is planned from traces, never profiled or rewritten by the plugin.
    hetero: tuple[HetPart, ...] = ()
    # Once its first job is measured: continue (it trains on) or resubmit; None = policy.
    on_profiled: str | None = None

    @property
    def builtin(self) -> bool:
        """Whether the row runs the built-in trainer rather than a user's script."""
        return self.script == BUILTIN_SCRIPT

    @property
    def workers_option(self) -> str:
        """How the script is given its worker count ("" = the probe sets it)."""
        return "--workers" if self.builtin else next(iter(self.workers_options), "")

    @property
    def probe_workers(self) -> int | None:
        """The row's worker count when the probe has to set it (no worker option)."""
        return self.workers if self.workers_given and not self.workers_option else None

    @property
    def gres(self) -> str:
        """--gres's value for the row's GPUs ("" for none)."""
        return gres_text(self.gpus, self.gpu_type)

    @property
    def resources(self) -> tuple:
        """What Slurm allocates: rows alike here share one verdict and may share an array."""
        return (self.cpus, self.mem_mb, self.gres, self.time, self.partition,
                tuple((p.gpu_type, p.gpus) for p in self.hetero))

    @property
    def model(self) -> str:
        """The model's name with its depth, e.g. resnet8."""
        return f"{self.arch}{self.depth}" if self.depth is not None else self.arch

    @functools.cached_property
    def fingerprint(self) -> str:
        """What decides the workload's resource sensitivity, hashed.

        Workers, CPUs and memory are left out on purpose: they are what gets tuned.
        The built-in trainer: its model, batch, data and loader (DALI and PyTorch decode
        answer differently to cores); pass-through args are out (a --seed must not split
        a sweep into many workloads), except the options that change its cost per sample.
        A user's script: its content and every argument it gets but the worker count
        (we cannot tell which of its options change its cost), its GPUs and processes.
        Worked out once per spec: a user's script is read and hashed for it.
        """
        if self.builtin:
            key: dict[str, object] = {"script": self.script, "arch": self.arch, "depth": self.depth,
                   "batch": self.batch, "dataset": self.dataset, "gpus": self.gpus,
                   "gpu_type": self.gpu_type, "loader": self.loader}
            shape = self.builtin_options(BUILTIN_SHAPE_OPTIONS)
            if shape:
                key["shape"] = shape
        else:
            args = without([*self.script_options, *self.args], self.workers_options)
            key = workload_key(self.script, args, self.gpus, self.procs)
            key["gpu_type"] = self.gpu_type
        if self.hetero:
            key["hetero"] = [[p.gpu_type, p.gpus] for p in self.hetero]
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]

    def builtin_options(self, names: tuple[str, ...]) -> dict[str, str]:
        """The values the pass-through args give these built-in trainer options."""
        if not self.builtin:
            return {}
        found, args = {}, list(self.args)
        for i, arg in enumerate(args):
            name, eq, value = arg.partition("=")
            if name in names:
                found[name] = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        return found

    @property
    def synthetic_data_name(self) -> str:
        """The generated dataset's folder: one per data kind and generation settings."""
        kind = BUILTIN_DATA_KIND[self.arch]
        opts = self.builtin_options(BUILTIN_DATA_OPTIONS)
        if not opts:
            return f"synthetic-{kind}"
        digest = hashlib.sha256(json.dumps(opts, sort_keys=True).encode()).hexdigest()[:8]
        return f"synthetic-{kind}-{digest}"

    @property
    def comment(self) -> str:
        """The job's Slurm comment: the fingerprint, which resources the row set (the
        site policy may let those win over a decision) and its known work. Only
        [a-z0-9:=, ] appear."""
        return job_comment(self.fingerprint, self.pinned, self.work)

    @property
    def work(self) -> str:
        """What the built-in trainer's run time scales with, as the comment's work= says
        it: i<iterations> (which win) or e<epochs>, the pass-through args' where they set
        them. "" for a user's script: its arguments are in its key already."""
        if not self.builtin:
            return ""
        given = {k: int(v) for k, v in self.builtin_options(
            ("--max-iterations", "--epochs")).items() if v.isdigit()}
        iterations = given.get("--max-iterations") or self.iterations
        if iterations:
            return f"i{iterations}"
        return f"e{given.get('--epochs') or self.epochs or 1}"

    def script_argv(self) -> list[str]:
        """The training script's options from the row's columns (shell-quoted later).

        The built-in trainer gets every option; a user's script gets only the options
        its row sets and it declares (checked when the CSV is read). Pass-through `args`
        are not included: they go last, so they win.
        """
        if not self.builtin:
            return list(self.script_options)
        argv: list[str] = []
        opt = argv.extend
        opt(["--arch", self.arch])
        if self.depth is not None:
            opt(["--depth", str(self.depth)])
        opt(["--batch", str(self.batch), "--workers", str(self.workers)])
        if self.iterations is not None:
            opt(["--max-iterations", str(self.iterations)])
        if self.epochs is not None:
            opt(["--epochs", str(self.epochs)])
        opt(["--loader", self.loader])
        if self.port is not None:
            opt(["--port", str(self.port)])
        return argv

