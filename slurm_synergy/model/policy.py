"""Site policy: the knobs an admin sets for the decision engine (etc/policy.toml)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.gpus import Catalog, CatalogError, GpuType, parse_catalog
from slurm_synergy.model.noise import NoiseRule
from slurm_synergy.model.runtime import TimeRule

CATALOG_KEY = "gpu"

# What each knob may be: (type, lowest, highest).
_BOUNDS: dict[str, tuple[type, float, float]] = {
    "tolerance": (float, 0.0, 0.5),
    "min_spread": (float, 0.0, 1.0),
    "max_spread": (float, 0.0, 1.0),
    "max_noise_loss": (float, 0.0, 0.5),
    "max_model_error": (float, 0.0, 10.0),
    "fairness_cap": (float, 1.0, 64.0),
    "gpu_threshold": (float, 0.0, 1.0),
    "power_cap_w": (float, 0.0, 5000.0),
    "zeus_eta": (float, 0.0, 1.0),
    "mem_headroom": (float, 0.0, 4.0),
    "min_mem_spread": (float, 0.0, 1.0),
    "min_mem_mb": (int, 1, 1 << 20),
    "gpu_mem_headroom": (float, 0.0, 4.0),
    "gpu_context_mib": (int, 0, 1 << 16),
    "user_request_wins": (bool, 0, 1),
    "shared_may_shrink": (bool, 0, 1),
    "profile_new": (bool, 0, 1),
    "watch_runs": (bool, 0, 1),
    "plain_scripts": (bool, 0, 1),
    "first_batch_timeout_s": (float, 5.0, 86400.0),
    "gpu_sample_period_s": (float, 0.05, 60.0),
    "hook_timeout_s": (float, 1.0, 120.0),
    "cgroup_peaks": (bool, 0, 1),
    "stats_keep_days": (int, 0, 36500),
    "sweep_window_s": (float, 0.5, 600.0),
    "sweep_repeats": (int, 1, 10),
    "time_min": (bool, 0, 1),
    "time_min_margin": (float, 0.0, 10.0),
    "time_min_jobs": (int, 1, 100),
    "time_min_floor_min": (int, 1, 10080),
}
# Knobs that name one of a few ways.
ON_PROFILED = ("continue", "resubmit")
_CHOICES: dict[str, tuple[str, ...]] = {"on_profiled": ON_PROFILED}
# Knobs that name something of the system's; "" names nothing.
_NAMES = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_NAMED = ("share_group",)
# Knobs that list such names.
_NAME_LISTS = ("skip_partitions", "skip_accounts", "skip_users")


@dataclass(frozen=True)
class Policy:
    tolerance: float = 0.05
    # The least spread a point with repeats is taken to have: a few runs a minute apart
    # share the node's state, and fall closer together than profiles minutes or hours
    # apart do (on this project's shared VMs the same count differed 10-20% between
    # profiles with runs within ±5%: `make bench`, docs/profiling.md).
    min_spread: float = 0.10
    # A measured point whose runs lie further apart than this (noise.spread_of over
    # their median) decides nothing: jobs of the workload run as asked.
    max_spread: float = 0.25
    # Where the runs cannot tell whether fewer cores are within the tolerance, they are
    # taken only while their median is at most this much under the best: the noise may
    # move a decision across the tolerance line, never to a loss past this (at or below
    # the tolerance: the medians alone decide).
    max_noise_loss: float = 0.10
    # A decision that rests on the throughput model (a core count the sweep did not
    # measure, or memory short of caching the dataset) needs its held-out error below this.
    max_model_error: float = 0.15
    fairness_cap: float = 2.0
    gpu_threshold: float = 0.10
    power_cap_w: float = 0.0         # 0 = the device's default limit
    zeus_eta: float = 0.5
    mem_headroom: float = 0.25
    # The least a memory peak is taken to vary between runs: it is counted this much
    # higher before the headroom, so a peak near a rounding step does not flip the size
    # from one profile to the next (one workload's runs peaked up to ±4% apart).
    min_mem_spread: float = 0.10
    min_mem_mb: int = 512
    # A GPU fits a job when its memory holds the step's peak plus this share, plus the
    # CUDA context and library workspaces that no tensor shows.
    gpu_mem_headroom: float = 0.10
    gpu_context_mib: int = 512
    user_request_wins: bool = False
    profile_new: bool = True
    watch_runs: bool = False
    first_batch_timeout_s: float = 300.0   # a profiling step's script may take this long
                                           # to its first batch (indexing a dataset, say)
    gpu_sample_period_s: float = 1.0  # the node's GPU sampler, for each job's lifetime
    hook_timeout_s: float = 20.0      # prolog/epilog give up after this; keep well under
                                      # slurm.conf's PrologEpilogTimeout
    # The node sampler follows every job's cgroup (GPUs or not) for its exact memory peak
    # and CPU time on each node: one small process per job and node while it runs.
    cgroup_peaks: bool = True
    # The epilogs' per-job records (exact peaks, energy) older than this are removed, once
    # a day; 0 keeps them all. Reports over older jobs read sacct's figures instead.
    stats_keep_days: int = 365
    # What the first job of an unknown workload does once it is measured: continue
    # (measured while it trains, trains to its end) or resubmit (profiled apart, then
    # submitted again right-sized: a second queue wait).
    on_profiled: str = "continue"
    sweep_window_s: float = 5.0       # a window of the in-run core sweep, at least
    sweep_repeats: int = 3            # windows at each swept core count
    # A Unix group whose members share decisions: a member's profile also sizes the
    # other members' jobs of that workload, where they have no profile of their own.
    # "" (the default): each user's profiles size that user's jobs alone.
    share_group: str = ""
    # A shared decision (another member's profile) only grows a member's job: it never
    # gives it fewer cores, less memory, other GPUs or a lower power limit than asked,
    # so a member cannot starve a colleague by a profile in their own name. True lets it
    # shrink too: the members then trust one another's profiles as their own.
    shared_may_shrink: bool = False
    # Plain batch scripts (any sbatch job `synergy submit` did not write) are keyed at
    # submission, their Python training measured in the run and right-sized as a CSV
    # row's are (the node's TaskProlog puts the probe on their path).
    plain_scripts: bool = True
    # Jobs in these partitions or accounts, or of these users, are left alone: no key, no
    # mark, no rewrite, no probe.
    skip_partitions: tuple[str, ...] = ()
    skip_accounts: tuple[str, ...] = ()
    skip_users: tuple[str, ...] = ()
    # The sync timer sets a pending job's --time-min from its workload's completed jobs
    # (model/runtime.py), so backfill may start it in a gap its --time would not fit, and
    # raises a running job's limit back to its --time before it would end there.
    time_min: bool = True
    time_min_margin: float = 0.5      # added to the predicted run time (twice it for one job)
    time_min_jobs: int = 1            # completed jobs of a workload before it gets one
    time_min_floor_min: int = 2       # the least time_min set, minutes

    @property
    def time_rule(self) -> TimeRule:
        """The knobs that set a job's time_min, for model.runtime."""
        return TimeRule(self.time_min, self.time_min_margin, self.time_min_jobs,
                        self.time_min_floor_min)

    @property
    def noise(self) -> NoiseRule:
        """The knobs that weigh a profile's noise, for model.noise."""
        return NoiseRule(self.tolerance, self.min_spread, self.max_spread,
                         self.max_noise_loss)


def _read_toml(path: Path, error: type[SynergyError], missing: str) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"no site policy at {path}{missing}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise error(f"site policy {path} cannot be read: {e}") from None


_NO_POLICY = " (SYNERGY_POLICY names another)"


def load_policy(path: Path) -> Policy:
    """The policy file (the site's is paths.policy_path()), checked knob by knob; a bad
    file is refused, naming the knob."""
    return _policy_of(_read_toml(path, SynergyError, _NO_POLICY), path)


def load_site(path: Path) -> tuple[Policy, Catalog]:
    """The policy and its GPU catalog from one read of the file: the policy as
    load_policy gives it (a fault raises), the catalog as site_catalog does (a fault is
    carried along, never raised)."""
    data = _read_toml(path, SynergyError, _NO_POLICY)
    return _policy_of(data, path), _catalog_of(data, path)


def _policy_of(data: dict[str, Any], path: Path) -> Policy:
    # The GPU catalog's tables are read on their own (load_catalog): a fault in them
    # must not take the rest of the policy down.
    unknown = sorted(set(data) - {f.name for f in fields(Policy)} - {CATALOG_KEY})
    if unknown:
        raise SynergyError(f"site policy {path}: unknown setting(s) {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        if name == CATALOG_KEY:
            continue
        if name in _NAME_LISTS:
            if not isinstance(value, list) or not all(
                    isinstance(v, str) and _NAMES.fullmatch(v) for v in value):
                raise SynergyError(f"site policy {path}: {name} must be a list of names, "
                                   f"not {value!r}")
            values[name] = tuple(value)
            continue
        if name in _NAMED:
            if not isinstance(value, str) or (value and not _NAMES.fullmatch(value)):
                raise SynergyError(f"site policy {path}: {name} must name a group, "
                                   f"not {value!r}")
            values[name] = value
            continue
        if name in _CHOICES:
            if value not in _CHOICES[name]:
                raise SynergyError(f"site policy {path}: {name} must be one of "
                                   f"{', '.join(_CHOICES[name])}, not {value!r}")
            values[name] = value
            continue
        kind, low, high = _BOUNDS[name]
        if kind is bool:
            if not isinstance(value, bool):
                raise SynergyError(f"site policy {path}: {name} must be true or false")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or (
                kind is int and not isinstance(value, int)):
            raise SynergyError(f"site policy {path}: {name} must be a {kind.__name__}, "
                               f"not {value!r}")
        elif not low <= value <= high:
            raise SynergyError(f"site policy {path}: {name} = {value} is outside "
                               f"[{low:g}, {high:g}]")
        values[name] = kind(value)
    return Policy(**values)


def load_catalog(path: Path) -> dict[str, GpuType]:
    """The policy file's GPU catalog (its [gpu.TYPE] tables); empty when it has none.
    CatalogError naming the file and the fault when it cannot be used."""
    data = _read_toml(path, CatalogError, ", so no GPU catalog")
    return parse_catalog(data.get(CATALOG_KEY, {}), str(path))


def site_catalog(path: Path) -> Catalog:
    """The catalog for decisions: never raises, since a fault in it must change nothing
    and reject nothing; the fault is carried along for `explain` to show."""
    try:
        data = _read_toml(path, CatalogError, ", so no GPU catalog")
    except CatalogError as e:
        return _unused(e)
    return _catalog_of(data, path)


def _catalog_of(data: dict[str, Any], path: Path) -> Catalog:
    try:
        types = parse_catalog(data.get(CATALOG_KEY, {}), str(path))
    except CatalogError as e:
        return _unused(e)
    return Catalog(types, "" if types else f"the site policy {path} has no GPU catalog")


def _unused(fault: CatalogError) -> Catalog:
    return Catalog({}, f"the GPU catalog is not used: {fault}", faulty=True)
