"""What several tests share: profiles to decide from and to store, a small training loop
for the probe, the corpus of users' scripts, and the shipped site policy with knobs changed.
Tests import these from here, never from one another."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from slurm_synergy import paths
from slurm_synergy.hooks.context import HookContext, HookLog
from slurm_synergy.decisions.service import DecisionService
from slurm_synergy.model.engine import NodeShape
from slurm_synergy.model.gpus import Catalog
from slurm_synergy.model.policy import Policy
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.site import Site
from slurm_synergy.slurm import Node, Slurm
from slurm_synergy.model.profile import (Allocation, FetchRates, GpuReadings, Point, PointError,
                                         PowerPoint, Profile, ThroughputModel, combine)

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
FP = "0123456789abcdef"
# The in-run flow kept short: half-second windows, one run each.
FAST_INRUN = Policy(sweep_window_s=0.5, sweep_repeats=1, first_batch_timeout_s=60)


def site(policy: Policy = FAST_INRUN, slurm=None) -> Site:
    """A site of `policy`, no GPU catalog, and `slurm` (the local cluster's by default)."""
    return Site(policy, Catalog({}, "no GPU catalog in this test"), slurm or Slurm())


def profile(train, p=0.01, h=0.001, g=None, gpus=1, fetch=None, rss=900.0, sweep=(),
            gpu_name="", extra=()):
    """A profile with train points {cores: samples/s} and a components model."""
    points = tuple(combine([Point("train", k, max(1, k - 1), 4096, run, 0.1, h, rss, 10.0)
                            for run in (v if isinstance(v, list) else [v])])
                   for k, v in train.items()) + tuple(extra)
    model = ThroughputModel("components", p, h, g, rss, fetch)
    readings = GpuReadings(bool(gpu_name), name=gpu_name, count=gpus, power_sweep=tuple(sweep),
                           max_limit_w=400.0 if sweep else None)
    return Profile("0123456789abcdef", "job", ("builtin:train",), 32,
                   Allocation(max(train), 4096, gpus, "n1", "srun", "7"), points, model,
                   readings, "t0", "t1", 40.0, "0.1.0")


def make_profile(fp: str = FP) -> Profile:
    points = (Point("train", 2, 1, 4096, 100.0, 0.2, 0.01, 900.0, 12.0,
                    repeats=(100.0, 96.0, 103.0), anon_mb=410.5),
              Point("train", 1, 1, 4096, 60.0, 0.5, 0.01, 850.0, 14.0),
              Point("loader", 1, 1, 4096, 80.0, 0.9, 0.002, 300.0, 8.0),
              Point("compute", 2, 0, 4096, 150.0, 0.0, 0.006, 700.0, 9.0))
    model = ThroughputModel("components", 0.0125, 0.006, None, 900.0,
                            FetchRates(3000.0, 200.0, 50.0, 0.05, 40),
                            (PointError(2, 1, 100.0, 95.0), PointError(1, 1, 60.0, 54.0)))
    gpu = GpuReadings(True, name="H100", count=1, util_pct=80.0, power_limit_w=700.0,
                      power_sweep=(PowerPoint(700.0, 100.0, 650.0),))
    return Profile(fp, "resnet-b64", ("builtin:train", "--arch", "resnet"), 64,
                   Allocation(2, 4096, 0, "vm", "srun", "42"), points, model, gpu,
                   "2026-11-22T10:00:00+00:00", "2026-11-22T10:01:00+00:00", 60.5, "0.1.0")


class OfflineSlurm:
    """What the decision service asks Slurm, answered by the test: one partition ("gpu")
    of nodes of `shape`, and accounting's association and QOS rows as sacctmgr prints
    them (limits enforced where `assocs` is given, else none)."""

    def __init__(self, shape: NodeShape, assocs: list[list[str]] | None = None,
                 qos: list[list[str]] | None = None):
        self.shape, self.assocs, self.qos_table = shape, assocs, qos or [["normal", "", "", "", ""]]

    def nodes(self, partition: str | None = None) -> list[Node]:
        s = self.shape
        types = s.gpu_types or ("",)
        each = [s.gpus // len(types) + (i < s.gpus % len(types)) for i in range(len(types))]
        gres = ",".join(f"gpu:{t}:{n}" if t else f"gpu:{n}" for t, n in zip(types, each) if n)
        return [Node("n1", "idle", s.cores, s.mem_mb, gres)]

    def default_partition(self) -> str:
        return "gpu"

    def config(self) -> dict[str, str]:
        return {"AccountingStorageEnforce": "associations,limits,qos" if self.assocs is not None
                else "associations"}

    def association_rows(self, fields) -> list[list[str]]:
        return self.assocs or []

    def qos_rows(self, fields) -> list[list[str]]:
        return self.qos_table


def offline_service(shape: NodeShape, policy: Policy | None = None,
                    stores: dict[int, ProfileStore] | None = None,
                    assocs: list[list[str]] | None = None,
                    qos: list[list[str]] | None = None,
                    groups: dict[str, set[int]] | None = None) -> DecisionService:
    """The decision service over an OfflineSlurm: every check it makes, no cluster;
    `groups` stands for the system's groups (share_group)."""
    known, named = stores or {}, groups or {}

    def members(name: str) -> set[int]:
        return named[name]          # KeyError: no such group, as grp says
    return DecisionService(OfflineSlurm(shape, assocs, qos), policy or Policy(),  # type: ignore[arg-type]
                           stores=known.get, members=members)


# 12 batches of 8 per epoch; it prints "done" only if it runs to its end.
LOOP = textwrap.dedent("""\
    import sys
    import torch
    from torch.utils.data import DataLoader, Dataset, IterableDataset

    class Items(Dataset):
        def __len__(self):
            return 96
        def __getitem__(self, i):
            return torch.full((4,), float(i)), i % 3

    class Stream(IterableDataset):
        def __iter__(self):
            for i in range(96):
                yield {"x": torch.full((4,), float(i))}

    kind = sys.argv[1] if len(sys.argv) > 1 else "map"
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    loader = DataLoader(Items() if kind == "map" else Stream(), batch_size=8, num_workers=3,
                        prefetch_factor=2)
    seen = 0
    for _ in range(epochs):
        for batch in loader:
            seen += 1
    print("workers", loader.num_workers, "done", seen, flush=True)
    sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    """)


def site_policy_with(**knobs: str) -> str:
    """etc/policy.toml's text with these top-level knobs set (a line appended at the end
    would land in its last [gpu.*] table)."""
    policy = (paths.ETC / "policy.toml").read_text()
    for name, value in knobs.items():
        policy, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", policy, flags=re.M)
        assert n == 1, f"etc/policy.toml has no one line setting {name}"
    return policy


def flow_policy(**knobs: str) -> str:
    """The shipped policy for tests of the in-run flow (measured, right-sized), not of its
    figures: the sweep's windows 1 s (each count still three times, as a site might set
    them for short jobs), and neither a window's noise nor the model's error refuses a
    decision (test_profiling checks those refusals); `knobs` set as well."""
    return site_policy_with(sweep_window_s="1.0", max_spread="1.0", max_model_error="1.0",
                            **knobs)


def hook_ctx(tmp_path: Path, job="101", gpus="0", comment="", cap_w=0.0, restart=0,
             uid="", gid: int | None = None, shared="") -> HookContext:
    """A node hook's context, its files under tmp_path (the job's uid "": no cgroup watch)."""
    return HookContext(job_id=job, node="n1", uid=uid, gid=gid,
                       gpu_ids=tuple(x for x in gpus.split(",") if x),
                       restart=restart, comment=comment, shared=shared,
                       policy=Policy(power_cap_w=cap_w or 0),
                       policy_error="" if cap_w is not None else "unreadable", cap_w=cap_w,
                       run_dir=tmp_path / "run", stats_dir=tmp_path / "stats",
                       log=HookLog(tmp_path / "hooks.log", "hook", job))
