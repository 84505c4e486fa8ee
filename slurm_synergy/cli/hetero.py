"""`synergy hetero`: plan one data-parallel job over two GPU types from measured traces."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from slurm_synergy.columns import aligned
from slurm_synergy.hetero.plan import Group, Plan, PlanError, best_plan, even_split
from slurm_synergy.hetero.traces import read_trace
from slurm_synergy.model.gpus import TYPE_RE
from slurm_synergy.model.policy import site_catalog
from slurm_synergy.paths import policy_path


def _pair(kind: str):
    """TYPE=VALUE, the type a gres type name."""
    def parse(text: str) -> tuple[str, str]:
        """TYPE=VALUE as (type, value)."""
        name, sep, value = text.partition("=")
        if not sep or not TYPE_RE.match(name) or not value:
            raise argparse.ArgumentTypeError(f"{text!r}: expected TYPE={kind}")
        return name, value
    return parse


def add_parser(sub) -> None:
    """`hetero --trace TYPE=FILE ... --global-batch N [...]`."""
    p = sub.add_parser("hetero", help="split one job's global batch and power limits over "
                       "two GPU types, from their measured time and energy")
    p.add_argument("--trace", type=_pair("FILE"), action="append", required=True,
                   metavar="TYPE=FILE", help="a type's trace: Zeus's JSON, keyed by batch "
                   "size, of {power_limit, energy, time} over the same number of steps "
                   "(once or twice)")
    p.add_argument("--gpus", type=_pair("N"), action="append", default=[], metavar="TYPE=N",
                   help="GPUs of a type (default 1 each)")
    p.add_argument("--idle", type=_pair("WATTS"), action="append", default=[],
                   metavar="TYPE=W", help="a type's idle power (default: the site "
                   "catalog's idle_w)")
    p.add_argument("--global-batch", type=int, required=True, metavar="N",
                   help="samples per step over all the GPUs")
    p.add_argument("--eta", type=float, default=0.5,
                   help="Zeus's weight of energy against time, 0 to 1 (default %(default)s)")
    p.add_argument("--json", action="store_true", help="the plan and the baseline as JSON")
    p.set_defaults(func=run)


def _number(text: str, what: str, whole: bool) -> float:
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        raise PlanError(f"{what}: {text!r} is not a {'whole ' if whole else ''}number") from None
    if not value >= 0:
        raise PlanError(f"{what}: {text!r} is negative")
    return value


def groups_of(args: argparse.Namespace) -> list[Group]:
    """Each type's trace, GPUs and idle power (W; the site catalog's where not given);
    PlanError for an option naming a type with no trace, or a type with no idle power."""
    types = [name for name, _ in args.trace]
    for opt, given in (("--gpus", args.gpus), ("--idle", args.idle)):
        stray = sorted({name for name, _ in given} - set(types))
        if stray:
            raise PlanError(f"{opt} names {', '.join(stray)}, which has no --trace")
    gpus = {name: int(_number(v, f"--gpus {name}", whole=True)) for name, v in args.gpus}
    idle = {name: _number(v, f"--idle {name}", whole=False) for name, v in args.idle}
    missing = [t for t in types if t not in idle]
    if missing:
        catalog = site_catalog(policy_path())
        for t in missing:
            if t not in catalog.types:
                why = catalog.problem or "it has no such type"
                raise PlanError(f"no idle power for {t}: give --idle {t}=W, or add "
                                f"[gpu.{t}] to the site catalog ({why})")
            idle[t] = catalog.types[t].idle_w
    return [Group(read_trace(Path(path), name), gpus.get(name, 1), idle[name])
            for name, path in args.trace]


def _text(label: str, plan: Plan) -> str:
    rows = [[s.gpu_type, str(s.gpus), str(s.batch),
             f"{s.micro_batch} x {s.accumulation}" if s.accumulation > 1 else "-",
             f"{s.power_limit_w:g} W", f"{s.busy_s:.3f}"] for s in plan.shares]
    table = aligned(["type", "GPUs", "batch/GPU", "micro-batch x steps", "power limit",
                     "busy"], rows)
    return (f"{label}:\n{table}\nstep {plan.step_time_s:.3f}, energy {plan.energy_j:.1f} J, "
            f"cost {plan.cost:.1f}")


def run(args: argparse.Namespace) -> int:
    """The best split of the global batch and power limits over the types, beside an even
    split, as text or JSON."""
    groups = groups_of(args)
    plan = best_plan(groups, args.global_batch, args.eta)
    baseline = even_split(groups, args.global_batch, args.eta)
    if args.json:
        print(json.dumps({**plan.as_dict(), "baseline": baseline.as_dict()}, indent=2))
        return 0
    print(f"global batch {args.global_batch}, eta {args.eta:g}; times and energies per step, "
          "in the traces' units (the window they measured)")
    print(_text("plan", plan))
    print(_text("even split, each type at its own best limit", baseline))
    print(f"plan / even split: time {plan.step_time_s / baseline.step_time_s:.2f}, energy "
          f"{plan.energy_j / baseline.energy_j:.2f}, cost {plan.cost / baseline.cost:.2f}")
    return 0
