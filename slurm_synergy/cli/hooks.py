"""`synergy hooks ...`: install the node prolog/epilog, and show this node's GPUs as the
hooks see them."""

from __future__ import annotations

import argparse
from pathlib import Path

from slurm_synergy import paths
from slurm_synergy.cli.plugin import install_options, release_check
from slurm_synergy.slurm import Slurm
from slurm_synergy.columns import aligned
from slurm_synergy.gpu import GpuError, open_backend
from slurm_synergy.model.policy import load_policy
from slurm_synergy.paths import policy_path
from slurm_synergy.hooks.install import HookPaths, apply, plan_text
from slurm_synergy.hooks.power import ceiling_mw


def run(args: argparse.Namespace) -> int:
    """This node's GPUs, or the slurm.conf lines and wrappers the hooks need (made with
    --apply)."""
    if args.action == "gpus":
        print(gpus_table())
        return 0
    conf = args.conf or paths.slurm_conf_file()
    conf = conf.resolve()
    if conf == paths.local_slurm_conf():
        from slurm_synergy.cluster.localbox import LocalCluster
        where = LocalCluster().hook_paths
    else:
        where = HookPaths.site()
    if args.stats_dir:
        where = HookPaths(args.stats_dir, where.log, where.run_dir, where.policy)
    print(release_check(Slurm(conf).version(), args))
    print("\n".join(apply(conf, where)) if args.apply else plan_text(conf, where))
    return 0


def gpus_table() -> str:
    """Each GPU of this node: how Slurm (minor), NVML (UUID, PCI) name it, and its limits
    against the ceiling the epilog restores."""
    backend = open_backend()
    if not backend.gpus:
        return backend.reason
    cap_w = load_policy(policy_path()).power_cap_w
    rows = []
    for g in backend.gpus:
        try:
            rng, now = g.power_range(), g.power_limit_mw()
            limits = [f"{now / 1000:g}", f"{rng.min_mw / 1000:g}-{rng.max_mw / 1000:g}",
                      "?" if rng.default_mw is None else f"{rng.default_mw / 1000:g}",
                      f"{ceiling_mw(rng, cap_w) / 1000:g}"]
        except GpuError as e:
            limits = [f"unreadable: {e}", "", "", ""]
        energy = g.energy_mj()
        rows.append(["-" if g.info.minor is None else str(g.info.minor), g.info.uuid,
                     g.info.pci_bus_id, g.info.name, *limits,
                     "yes" if energy is not None else "no"])
    head = ["minor", "uuid", "pci", "name", "limit W", "range W", "default W", "ceiling W",
            "energy counter"]
    cap = f"site cap {cap_w:g} W" if cap_w > 0 else "no site cap: the default limit is the ceiling"
    return aligned(head, rows) + f"\n{backend.name}: {len(rows)} GPU(s); {cap}"


def add_parser(sub) -> None:
    """`hooks install [--apply] [--conf] [--stats-dir]` and `hooks gpus`."""
    p = sub.add_parser("hooks", help="the node prolog/epilog: GPU power caps and energy")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("install", help="the slurm.conf lines and wrappers the hooks need")
    install_options(a)
    a.add_argument("--stats-dir", type=Path, help="per-job GPU stats, on storage the report "
                   "host shares (default: SYNERGY_GPU_STATS, else /var/lib/slurm-synergy/gpustats)")
    actions.add_parser("gpus", help="this node's GPUs, their limits and the ceiling")
    p.set_defaults(func=run)
