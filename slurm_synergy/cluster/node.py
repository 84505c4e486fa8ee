"""Lay out the local cluster's nodes on the real machine.

Without GPU hardware the box has three nodes, each a slurmd in a UTS namespace of its
own (Debian's slurmd is built without --enable-multiple-slurmd, so `slurmd -N` is not
there): the namespace's hostname is how slurmd finds its NodeName, and each listens on
a port of its own. With real GPUs there is one node: the GPUs cannot be split between
nodes without the hooks of two nodes setting the same board's power limit.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from slurm_synergy.model.errors import SynergyError

# Memory kept back for the OS, the daemons and MariaDB: the larger of 1 GiB and 10%.
HEADROOM_MIN_MB = 1024
HEADROOM_FRACTION = 0.10
# Without hardware: file-backed GPUs of two types whose memory (the policy's catalog:
# 1 and 4 GiB) a built-in workload can outgrow on this machine, so that moving a job
# to the type that holds it is exercised for real. node1 has both types (the default
# partition is node1 alone), node2 and node3 one each (a job over two nodes or two types).
FAKE_NODES = (("node1", (("local1g", 2), ("local4g", 2))),
              ("node2", (("local1g", 2),)),
              ("node3", (("local4g", 2),)))
# One slurmd port per node; 6819 and 6820 are slurmdbd's and MariaDB's (localbox.PORTS).
SLURMD_PORTS = (6818, 6821, 6822)
CGROUP_V1_CONTROLLERS = ("cpuset", "memory", "freezer")


@dataclass(frozen=True)
class NodeSpec:
    name: str                      # NodeName, and the hostname its slurmd runs under
    address: str
    port: int
    cpus: int
    mem_mb: int
    gpus: int
    gpus_real: bool
    gpu_files: tuple[str, ...] = field(default_factory=tuple)
    gpu_types: tuple[str, ...] = field(default_factory=tuple)     # one per file; "" untyped

    def describe(self) -> str:
        """One line for `synergy cluster up`: the node's cores, memory (MB) and GPUs."""
        return (f"{self.name}: {self.cpus} CPUs, {self.mem_mb} MB, {self.gres or 'no GPUs'}"
                f"{'' if self.gpus_real or not self.gpus else ' (file-backed)'}")

    @property
    def gres(self) -> str:
        """slurm.conf's Gres= for the node: gpu:TYPE:N per type, in file order."""
        counts: dict[str, int] = {}
        for t in self.gpu_types or ("",) * self.gpus:
            counts[t] = counts.get(t, 0) + 1
        return ",".join(f"gpu:{t}:{n}" if t else f"gpu:{n}" for t, n in counts.items())


@dataclass(frozen=True)
class Layout:
    """The local cluster: slurmctld on the machine, slurmd per node on loopback ports.

    Every node is the whole machine's cores and memory: they share them, which is why the
    default partition is node1 alone (a profile measures without a neighbour on its
    cores) and the others are there for jobs over several nodes or GPU types.
    """

    host: str                      # the machine's hostname: SlurmctldHost must be it
    nodes: tuple[NodeSpec, ...]

    @property
    def default(self) -> NodeSpec:
        """node1, the default partition's one node."""
        return self.nodes[0]

    @property
    def gpus_real(self) -> bool:
        """Whether the GPUs are the machine's real ones rather than file-backed."""
        return self.default.gpus_real

    @property
    def gpu_tres(self) -> str:
        """AccountingStorageTRES's GPU part: sacct shows a type only if it is tracked."""
        types = dict.fromkeys(t for n in self.nodes for t in n.gpu_types if t)
        return ",".join(["gres/gpu", *(f"gres/gpu:{t}" for t in types)])



def meminfo_mb(meminfo: str) -> int:
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


def detect(state: Path) -> Layout:
    """The layout on this machine: one node with the real GPUs where there are any, else the
    three nodes of file-backed GPUs under `state`/dev (FAKE_NODES)."""
    host = socket.gethostname().split(".")[0]
    cpus, mem = os.cpu_count() or 1, meminfo_mb(Path("/proc/meminfo").read_text())
    count, gpu_type = real_gpus()
    if count:
        files = tuple(f"/dev/nvidia{i}" for i in range(count))
        return Layout(host, (NodeSpec("node1", "127.0.0.1", SLURMD_PORTS[0], cpus, mem, count,
                                      True, files, (gpu_type,) * count),))
    nodes = []
    for i, (name, kinds) in enumerate(FAKE_NODES):
        # GPUs without hardware: inert devices, so Slurm schedules and accounts them for real.
        types = tuple(t for t, n in kinds for _ in range(n))
        files = tuple(str(state / "dev" / name / f"gpu{j}") for j in range(len(types)))
        nodes.append(NodeSpec(name, "127.0.0.1", SLURMD_PORTS[i], cpus, mem, len(types), False, files, types))
    return Layout(host, tuple(nodes))


HOSTS = Path("/etc/hosts")
HOSTS_MARK = "# slurm-synergy local cluster"
LOOPBACK = "127.0.0.1"


def add_hosts(names: list[str], hosts: Path = HOSTS) -> None:
    """The node names resolve, as on any cluster: a job's own hostname (torchrun's
    rendezvous looks it up) and the other nodes' (a multi-node job's MASTER_ADDR). One
    line in /etc/hosts, marked as ours and replaced when the nodes change."""
    line = f"{LOOPBACK} {' '.join(names)} {HOSTS_MARK}"
    try:
        lines = hosts.read_text().splitlines()
        kept = [x for x in lines if not x.endswith(HOSTS_MARK)]
        if line not in lines or len(kept) != len(lines) - 1:
            # Written in place: a container's /etc/hosts is a bind mount, not renamed over.
            hosts.write_text("\n".join([*kept, line]) + "\n")
    except OSError as e:
        raise SynergyError(f"cannot name the local nodes in {hosts}: {e.strerror}; the "
                           "local cluster needs root") from None


def configured_nodes(conf: Path) -> dict[str, dict[str, str]]:
    """Each node slurm.conf names, with its SlurmdPidFile and SlurmdLogFile; before the
    first `up`, every node the box may have."""
    try:
        lines = conf.read_text().splitlines()
    except OSError:
        return {name: {} for name, _ in FAKE_NODES}
    settings = dict(line.split("=", 1) for line in lines
                    if line.startswith(("SlurmdPidFile=", "SlurmdLogFile=")))
    return {line.split()[0].split("=", 1)[1]: settings for line in lines
            if line.startswith("NodeName=")}


def make_fake_gpu(path: Path) -> None:
    """A GPU without hardware, as Slurm's gres/gpu will take it.

    Slurm refuses a plain file for gres File=, so this is a character device with
    /dev/null's numbers: inert if anything opens it, and its name's index is what
    Slurm puts in CUDA_VISIBLE_DEVICES.
    """
    null = os.stat("/dev/null").st_rdev
    try:
        if stat.S_ISCHR(path.lstat().st_mode) and path.lstat().st_rdev == null:
            return
        path.unlink()
    except FileNotFoundError:
        pass
    try:
        os.mknod(path, stat.S_IFCHR | 0o644, null)
    except PermissionError as exc:
        raise SynergyError(f"cannot create the file-backed GPU {path}: {exc.strerror}; "
                           "the local cluster needs root (mknod)") from exc
