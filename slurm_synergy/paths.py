"""Where things live: the project tree, the local cluster's state, the user's data."""

from __future__ import annotations

import os
import re
from pathlib import Path

from slurm_synergy import slurm_release

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
# A checkout (and an editable install of one) keeps templates/, etc/, data/ and jobs_csv/
# at its top; a wheel ships them inside the package (setup.py).
IN_CHECKOUT = (ROOT / "pyproject.toml").is_file() and (ROOT / "templates").is_dir()
SHIPPED = ROOT if IN_CHECKOUT else PACKAGE
TEMPLATES = SHIPPED / "templates"
ETC = SHIPPED / "etc"
DATA = SHIPPED / "data"
JOBS_CSV = SHIPPED / "jobs_csv"
# Jobs run the profiler and the built-in trainer as modules of the install; the trainer's
# file is where its options are declared and what its workload key hashes.
TRAIN_MODULE = "profiler.train"
TRAIN_SCRIPT = ROOT / "profiler" / "train.py"
PROFILER_MODULE = "profiler.offline_profiler"
# In a job's output folder: the offline profiler's working folder, and in it the move
# to another GPU type it asks `synergy plugin resubmit` for (the job script passes it on).
PROFILE_WORKDIR = "profile"
MOVE_FILE = "gpu-move.json"


def workspace() -> Path:
    """Where the local cluster and the demo keep what they write: the checkout, or for an
    install, the user's slurm-synergy folder."""
    return ROOT if IN_CHECKOUT else home_dir()


def state_dir() -> Path:
    """The local cluster's state folder (rendered config, spool, logs, database)."""
    default = workspace() / slurm_release.chosen().state_name
    return Path(os.environ.get("SYNERGY_STATE", default)).resolve()


SLURM_COMMANDS = "bin"      # the state folder's scripts running another release's commands


def local_slurm_commands() -> Path | None:
    """The local cluster's Slurm commands where it runs another release than the host's
    (cluster/rootfs.py writes them; they go first on PATH); None for the host's own."""
    return None if slurm_release.chosen().hosted else state_dir() / SLURM_COMMANDS


def home_dir() -> Path:
    """Per-user data that outlives a cluster: the submission ledger (later profiles)."""
    default = Path.home() / ".slurm-synergy"
    return Path(os.environ.get("SYNERGY_HOME", default)).resolve()


_CLUSTER_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def cluster_folder(root: Path, cluster: str) -> Path:
    """`root`'s folder for one cluster's records: job ids are a cluster's own, and start
    again when a cluster is rebuilt (the local cluster then takes a new name), so two
    clusters sharing a home or a stats folder never mix them. "" (outside any cluster's
    job, a test's hook) is the root itself."""
    if not cluster:
        return root
    return root / "clusters" / (cluster if _CLUSTER_RE.match(cluster) else "unnamed")


def cluster_dir(cluster: str) -> Path:
    """The user's records that name jobs by id (ledger, chains, outputs), per cluster."""
    return cluster_folder(home_dir(), cluster)


def cluster_stats_dir(cluster: str, env: dict[str, str] | None = None) -> Path:
    """The node epilogs' per-job GPU stats of one cluster (gpu_stats_dir's folder)."""
    return cluster_folder(gpu_stats_dir(env), cluster)


def job_cluster() -> str:
    """The cluster of the job this process runs in (Slurm sets it), "" outside a job."""
    return os.environ.get("SLURM_CLUSTER_NAME", "")


def runs_dir(cluster: str, job_id: str) -> Path:
    """A plain script's job's records: its runs' probe results (measure/inrun/attach.py)."""
    return cluster_dir(cluster) / "runs" / (job_id or "unknown")


def outputs_dir(cluster: str) -> Path:
    """job id -> the folder a job ran in (its summary.json), written by each job."""
    return cluster_dir(cluster) / "outputs"


def local_slurm_conf() -> Path:
    """The local cluster's slurm.conf, in its state folder (there once rendered)."""
    return state_dir() / "etc" / "slurm.conf"


# Where Slurm's commands look without SLURM_CONF (Debian's packages, most sites).
DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")


def slurm_conf() -> Path | None:
    """The slurm.conf every command uses: SLURM_CONF, else None (Slurm's own default).

    Never the local cluster's unless SLURM_CONF names it: a site that installs from a
    checkout that once ran the demo must not have root's cron act on the demo's cluster.
    `synergy cluster`, `make demo` and the Makefile's local targets name it themselves.
    """
    return Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else None


def slurm_conf_file() -> Path:
    """The slurm.conf file in use: SLURM_CONF, else Slurm's default path."""
    return slurm_conf() or DEFAULT_SLURM_CONF


def gpu_stats_dir(env: dict[str, str] | None = None) -> Path:
    """Where node epilogs leave per-job GPU stats and reports read them.

    On a site cluster this must be storage the report host shares with the GPU nodes;
    SYNERGY_GPU_STATS names it. The local cluster keeps them in its state folder.
    """
    env = dict(os.environ) if env is None else env
    if env.get("SYNERGY_GPU_STATS"):
        return Path(env["SYNERGY_GPU_STATS"])
    if on_local_cluster(env):
        return state_dir() / "gpustats"
    return Path("/var/lib/slurm-synergy/gpustats")


def on_local_cluster(env: dict[str, str] | None = None) -> bool:
    """Whether the slurm.conf in use (SLURM_CONF of `env`) is the local cluster's, whose
    shared folders live in its state folder."""
    env = dict(os.environ) if env is None else env
    return bool(env.get("SLURM_CONF")) and Path(env["SLURM_CONF"]).resolve() == \
        local_slurm_conf()


def local_profile_store(state: Path | None = None) -> Path:
    """The local cluster's shared profile store (mode 1777, made by `cluster up`), which
    its sync timer compiles, as a site's cron compiles the site's."""
    return (state or state_dir()) / "profiles"


def policy_path() -> Path:
    """The site policy: SYNERGY_POLICY, else etc/policy.toml."""
    return Path(os.environ.get("SYNERGY_POLICY", ETC / "policy.toml"))
