"""The two-type planner on Zeus²'s published traces: its plan against Zeus²'s own choice
and the even split, all three evaluated by the planner's step model, and the time a
plan takes.

For each dataset (CIFAR-100, ImageNet; one A10G and one T4, idle power from the site
catalog) and global batch, writes step time, energy and Zeus's cost of each, with the
splits and limits, to bench/results/hetero.{json,md}; the planning time is the median
and range of --repeats plans over every measured point.

    .venv/bin/python bench/bench_hetero.py [--batches 4096,1024] [--eta 0.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from slurm_synergy.hetero.plan import Group, Plan, best_plan, evaluate, even_split  # noqa: E402
from slurm_synergy.hetero.traces import read_trace  # noqa: E402
from slurm_synergy.hetero.zeus2 import zeus2_choice  # noqa: E402
from slurm_synergy.model.policy import site_catalog  # noqa: E402
from slurm_synergy.paths import DATA, policy_path  # noqa: E402

TYPES = ("a10", "t4")


def row(plan: Plan | None) -> dict:
    if plan is None:
        return {"evaluable": False}
    return {"split": [s.batch for s in plan.shares],
            "micro": [f"{s.micro_batch}x{s.accumulation}" for s in plan.shares],
            "limits_w": [s.power_limit_w for s in plan.shares],
            "step_time_s": round(plan.step_time_s, 4), "energy_j": round(plan.energy_j, 2),
            "cost": round(plan.cost, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="4096,1024")
    parser.add_argument("--eta", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    catalog = site_catalog(policy_path())
    out = []
    for dataset in ("cifar", "imagenet"):
        traces = [read_trace(DATA / "zeus2" / f"{dataset}_{t}.json", t) for t in TYPES]
        groups = [Group(tr, 1, catalog.types[tr.gpu_type].idle_w) for tr in traces]
        for batch in (int(b) for b in args.batches.split(",")):
            seconds = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                plan = best_plan(groups, batch, args.eta)
                seconds.append(time.perf_counter() - t0)
            theirs = zeus2_choice(traces[0], traces[1], batch)
            out.append({"dataset": dataset, "global_batch": batch, "eta": args.eta,
                        "plan_s": {"median": round(statistics.median(seconds), 4),
                                   "min": round(min(seconds), 4),
                                   "max": round(max(seconds), 4)},
                        "ours": row(plan),
                        "zeus2": {**row(evaluate(groups, theirs.batches, theirs.limits,
                                                 args.eta)),
                                  "zeus2_split": list(theirs.batches),
                                  "zeus2_limits_w": list(theirs.limits)},
                        "even": row(even_split(groups, batch, args.eta))})
    lines = ["| dataset | global batch | plan | A10 / T4 batch (micro x steps) | limits (W) | "
             "step time | energy (J) | cost | planned in (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in out:
        for name in ("ours", "zeus2", "even"):
            f = r[name]
            if not f.get("evaluable", True):
                lines.append(f"| {r['dataset']} | {r['global_batch']} | {name} | "
                             "outside the measured batches | | | | | |")
                continue
            split = " / ".join(f"{b} ({m})" for b, m in zip(f["split"], f["micro"]))
            took = (f"{r['plan_s']['median']:.3f} ({r['plan_s']['min']:.3f}-"
                    f"{r['plan_s']['max']:.3f})" if name == "ours" else "")
            lines.append(f"| {r['dataset']} | {r['global_batch']} | {name} | {split} | "
                         f"{' / '.join(f'{w:g}' for w in f['limits_w'])} | "
                         f"{f['step_time_s']:.2f} | {f['energy_j']:.0f} | {f['cost']:.0f} | "
                         f"{took} |")
    args.results.mkdir(parents=True, exist_ok=True)
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "idle_w": {t: catalog.types[t].idle_w for t in TYPES}, "runs": out}
    (args.results / "hetero.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.results / "hetero.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
