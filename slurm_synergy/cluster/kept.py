"""What a local cluster's state makes once and keeps: its name and its database password."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

from slurm_synergy.fileio import atomic_write_text

# Each local cluster is named anew when its state is made, so that the job ids of two
# clusters (two checkouts, or one rebuilt) never meet in the records a user keeps.
CLUSTER_PREFIX = "synergy-"


def cluster_name(etc: Path) -> str:
    """Kept in etc/cluster-name; a state from before it keeps the name its slurm.conf
    has (slurmctld refuses a cluster renamed under its saved state)."""
    kept = etc / "cluster-name"
    if not kept.exists():
        conf = etc / "slurm.conf"
        old = re.search(r"^ClusterName=(\S+)$", conf.read_text(), re.MULTILINE) \
            if conf.exists() else None
        atomic_write_text(kept, old.group(1) if old else CLUSTER_PREFIX + secrets.token_hex(4),
                          0o644)
    return kept.read_text().strip()


def db_password(etc: Path) -> str:
    """slurmdbd's MariaDB password, kept in etc/dbpass (made once, readable by its owner alone)."""
    secret = etc / "dbpass"
    if not secret.exists():
        atomic_write_text(secret, secrets.token_hex(16), 0o600)
    return secret.read_text().strip()
