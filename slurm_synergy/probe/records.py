"""What the probe measures: per process, and for the whole run.

Each probed process writes its own record (`<pid>.json` in the run's folder), whole, when
it takes its first batch, when its measurement ends and, in watch mode, every few
seconds; the supervisor reads them all and writes one result file. Imports nothing heavy:
the supervisor and the reports read these without torch.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from slurm_synergy.fileio import PRIVATE, atomic_write_text

MODES = ("train", "loader", "compute", "watch", "memory")
# The folder whose sitecustomize.py installs the hooks in every Python process that has
# it first on PYTHONPATH (the supervisor puts it there, or the node's TaskProlog).
BOOT = Path(__file__).resolve().parent / "boot"
ENV_DIR = "SYNERGY_PROBE_DIR"
ENV_CONFIG = "SYNERGY_PROBE_CONFIG"
# In a run measured while it trains (measure/inrun/supervisor.py), the supervisor's orders to the
# processes: a JSON object {"window": id, "threads": torch threads or null for the
# process's own, "record_s": seconds between record writes}, written whole.
CONTROL_NAME = "control.json"
# How often a process writes its record while a supervisor measures it in windows, and
# otherwise while it is watched (the supervisor's orders change it: record_s above): a
# right-sized run's pace is read from these (measure/inrun/pace.py), a non-durable write.
RECORD_S = 0.25
WATCH_RECORD_S = 5.0


@dataclass(frozen=True)
class ProbeConfig:
    """How every process of one run is probed; passed to them in the environment.

    mode: train (end to end), loader (the script's loader drained alone, no step run),
    compute (the first batch replayed, no loader), watch (the real run, never stopped),
    memory (as train, with PyTorch's memory tracker over the measured steps).
    """

    mode: str = "train"
    workers: int | None = None      # loader workers to set; None leaves the script's
    warmup: int = 3                 # batches left out before the measured window
    iterations: int = 20            # measured steps, then the script is ended
    interval_s: float = 30.0        # watch mode: seconds between record writes
    sync_cuda: bool = True          # synchronise CUDA at each batch so the split is true
    # Watch mode: follow the supervisor's control file (CONTROL_NAME), so that the run's
    # cores can be swept while it trains.
    controlled: bool = False
    # Train mode: seconds the script trains on after its measured steps, while the
    # supervisor reads its memory ten times a second. A peak is a maximum over time: a
    # fast script's loader worker lives for a fraction of a second each epoch, and a step
    # of it can fall between two looks (docs/profiling.md).
    peak_s: float = 0.0

    def to_env(self) -> str:
        """The config as JSON, for the environment of the probed processes."""
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str) -> "ProbeConfig":
        """The config from `to_env`'s JSON; fields it does not know are dropped."""
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# A measurement of fewer steps than this says little about a rate: the profiler's windows
# are never shorter, and a script that ends on its own measured at least this many steps
# past its warm-up is measured on those.
LEAST_STEPS = 5


@dataclass
class ProcessRecord:
    """One probed process: the script, or one of its ranks."""

    pid: int
    rank: int | None                # RANK from torchrun or SLURM_PROCID; None alone
    argv: list[str]
    state: str = "started"          # started, iterating, measured, ended, failed
    error: str = ""                 # the exception that ended the process, if any
    loaders: list[str] = field(default_factory=list)   # kinds seen: DataLoader, DALI
    workers_set: int | None = None  # what the probe set the loaders' workers to
    batches: int = 0                # batches taken, warm-up included
    steps: int = 0                  # measured steps (complete ones)
    samples: int = 0                # samples in the measured steps
    seconds: float = 0.0            # wall time of the measured steps
    wait_s: float = 0.0             # of which waiting on the loader
    cpu_s: float = 0.0              # this process's CPU time over the measured steps
    batch_size_known: bool = True
    first_batch_s: float | None = None   # from the process's start to its first batch
    peak_rss_mb: float = 0.0
    peak_gpu_mem_mb: float | None = None
    step_peak_mib: float | None = None   # memory mode: the tracker's peak over the steps
    step_peak_device: str = ""           # ... on this device (cuda:0, cpu)
    dataset_len: int | None = None
    data_root: str = ""             # a folder the dataset reads from, when it says
    cpus: int = 0                   # CPUs it could run on when it started (its affinity)
    # Every step since the first batch, warm-up included, up to the last step boundary
    # (`clock`, time.monotonic(), which every process of the host shares): what a
    # supervisor reads to measure any window of the run.
    clock: float = 0.0
    total_steps: int = 0
    total_samples: int = 0
    total_wait_s: float = 0.0
    loader_workers: int | None = None   # the largest num_workers of its DataLoaders
    window: int = -1                # the last control window this process has applied
    longest_step_s: float = 0.0     # its longest step since that window's order began
    threads: int | None = None      # torch's intra-op threads at `clock`, once torch is in

    @property
    def samples_per_s(self) -> float:
        """Samples per second over the measured steps; 0 before any."""
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    def write(self, folder: Path) -> None:
        """Write the record into the run's folder (0600), one file per host and process."""
        # By host too: an srun across nodes may write to one shared folder.
        name = f"{socket.gethostname()}-{self.pid}.json"
        atomic_write_text(folder / name, json.dumps(asdict(self)) + "\n", PRIVATE,
                          durable=False)


def read_records(folder: Path) -> list[ProcessRecord]:
    """Every process record in a run's folder; one being replaced is skipped this time."""
    known = {f.name for f in fields(ProcessRecord)}
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
            out.append(ProcessRecord(**{k: v for k, v in data.items() if k in known}))
        except (OSError, ValueError, TypeError):
            continue
    return out


# The loader kinds (ProcessRecord.loaders) of a script that takes no batch from a loader:
# its steps are its optimizer's, or (weights updated by hand) autograd's backward passes.
OPTIMIZER = "optimizer"
BACKWARD = "backward"
HAND_STEPS = (OPTIMIZER, BACKWARD)


@dataclass(frozen=True)
class Measurement:
    """The run as a whole. Ranks train side by side, so their rates add up."""

    processes: int                  # processes that took batches
    samples_per_s: float
    data_wait_share: float          # of the step time, mean over processes
    steps: int                      # measured steps, the fewest of any process
    samples: int
    seconds: float                  # the longest measured window
    cpu_s_per_sample: float         # the training processes' CPU time per sample
    # The whole process tree's peak, loader workers included: its processes' resident
    # memory summed (a page they share counted in each).
    peak_rss_mb: float
    peak_gpu_mem_mb: float | None
    dataset_len: int | None
    data_root: str
    step_peak_mib: float | None = None  # memory mode: the highest rank's
    step_peak_device: str = ""
    # The tree's peaks as TreeMemory tells them; None where the kernel cannot tell them.
    peak_pss_mb: float | None = None
    peak_own_mb: float | None = None
    peak_anon_mb: float | None = None
    # Whether the steps' batches came from a data loader (False: the script slices its own
    # tensors, its steps counted at optimizer steps or backward passes; no input pipeline
    # runs apart from the step, so no input-only or compute-only step can measure it).
    from_loader: bool = True


@dataclass(frozen=True)
class TreeMemory:
    """A process tree's memory at its peaks, in MB (tree.ProcessTree)."""

    rss_mb: float                   # its processes' resident memory summed
    pss_mb: float | None = None     # each page once, shared ones in proportion (Pss)
    # Its own: anonymous and shared memory each page once, plus the file pages of the
    # process that maps most counted whole; unlike Pss, no other job on the node moves it.
    own_mb: float | None = None
    anon_mb: float | None = None    # the anonymous and shared part

    @property
    def footprint_mb(self) -> float:
        """Its peak: its own where the kernel tells it, else each page once, else its
        processes' resident memory summed."""
        return self.own_mb or self.pss_mb or self.rss_mb


def measure(records: list[ProcessRecord], tree: TreeMemory) -> Measurement | None:
    """None when no process completed a measured step."""
    ranks = [r for r in records if r.steps > 0 and r.seconds > 0]
    if not ranks:
        return None
    samples = sum(r.samples for r in ranks)
    gpu = [r.peak_gpu_mem_mb for r in ranks if r.peak_gpu_mem_mb is not None]
    lens = [r.dataset_len for r in ranks if r.dataset_len]
    tracked = max((r for r in ranks if r.step_peak_mib is not None),
                  key=lambda r: r.step_peak_mib or 0.0, default=None)
    return Measurement(
        processes=len(ranks),
        samples_per_s=sum(r.samples_per_s for r in ranks),
        data_wait_share=sum(r.wait_s / r.seconds for r in ranks) / len(ranks),
        steps=min(r.steps for r in ranks), samples=samples,
        seconds=max(r.seconds for r in ranks),
        cpu_s_per_sample=sum(r.cpu_s for r in ranks) / samples if samples else 0.0,
        peak_rss_mb=max(tree.rss_mb, sum(r.peak_rss_mb for r in ranks)),
        peak_gpu_mem_mb=max(gpu) if gpu else None,
        dataset_len=max(lens) if lens else None,
        data_root=next((r.data_root for r in ranks if r.data_root), ""),
        step_peak_mib=tracked.step_peak_mib if tracked else None,
        step_peak_device=tracked.step_peak_device if tracked else "",
        peak_pss_mb=tree.pss_mb or None, peak_own_mb=tree.own_mb or None,
        peak_anon_mb=tree.anon_mb or None,
        from_loader=any(k not in HAND_STEPS for r in ranks for k in r.loaders))


@dataclass(frozen=True)
class ProbeResult:
    """What `python -m slurm_synergy.probe` writes to --out: the verdict, the whole run's
    measurement and every process's record."""

    ok: bool
    reason: str                     # why not, in one line naming the script
    script: str
    mode: str
    exit_status: int | None
    measurement: Measurement | None
    processes: list[ProcessRecord]
    started_processes: list[str]    # commands the script started that ran unprobed
    # Not measured, and a run of it never will be: it ran without a step the probe sees
    # (no loader batch, optimizer step or backward pass in its own processes).
    no_step: bool = False

    def write(self, path: Path) -> None:
        """Write the result to `path` (0600), whole."""
        # It holds the run's command line: its arguments may be tokens or paths.
        atomic_write_text(path, json.dumps(asdict(self), indent=1) + "\n", PRIVATE)


def read_result(path: Path) -> dict[str, Any]:
    """A result file as plain data; ValueError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a probe result ({e})") from None
    if not isinstance(data, dict) or "ok" not in data or "mode" not in data:
        raise ValueError(f"{path}: not a probe result (no verdict)")
    return data


def probe_dir_of(out: Path) -> Path:
    """Where the processes of the run written to `out` keep their records."""
    return out.with_name(f".{out.name}.{os.getpid()}.d")
