"""Site policies for tests: the shipped one with a few knobs changed."""

from __future__ import annotations

import re

from slurm_synergy import paths


def site_policy_with(**knobs: str) -> str:
    """etc/policy.toml's text with these top-level knobs set (a line appended at the end
    would land in its last [gpu.*] table)."""
    policy = (paths.ETC / "policy.toml").read_text()
    for name, value in knobs.items():
        policy, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", policy, flags=re.M)
        assert n == 1, f"etc/policy.toml has no one line setting {name}"
    return policy
