"""Profile the built-in workloads on the cluster, several times from scratch, and report
what profiling costs, how far the model is off, and whether the decisions hold.

Each round submits jobs_csv/profile_suite.csv with --profile-only into a fresh profile
store, so every workload is profiled inside its own allocation (srun steps, Slurm's
cgroups), and decides from each profile with the site policy against this cluster's
node. Writes the profiles' table and the decisions of every round
(bench/results/profiles.md), a plot of throughput against cores from the first round
(bench/results/profiles.png) and the figures (bench/results/profiles.json): per point
the median and spread of its runs, the model's error on the held-out points, the
decision, and the cost of profiling in seconds and as a share of a one-hour job.

    make bench          # or: .venv/bin/python bench/bench_profiles.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from slurm_synergy import paths  # noqa: E402
from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.submission.csvjobs import load_jobs  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.model.engine import Decision, NoDecision, decide  # noqa: E402
from slurm_synergy.model.policy import load_policy, site_catalog  # noqa: E402
from slurm_synergy.model.jobspec import JobSpec  # noqa: E402
from slurm_synergy.model.profile import Point, Profile  # noqa: E402
from slurm_synergy.model.throughput import fit_components  # noqa: E402
from slurm_synergy.paths import policy_path  # noqa: E402
from slurm_synergy.profile_table import JOB_HOUR_S, markdown, plot  # noqa: E402
from slurm_synergy.profiles import ProfileStore, user_folder  # noqa: E402
from slurm_synergy.decisions.table import entries_of, read, table_path  # noqa: E402
from slurm_synergy.slurm import Slurm, node_shape  # noqa: E402


def profile_round(csv: Path, work: Path, steps: str = "warm") -> list[Profile]:
    """The suite profiled once from scratch, its steps forked from a warm interpreter
    or each a new process (`steps`); SystemExit naming what failed."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "store").mkdir(parents=True)
    store = ProfileStore(user_folder(work / "store"))
    # The profiles' decisions go to a table of the bench's own, not the cluster's.
    env = dict(os.environ, SYNERGY_PROFILES=str(work / "store"), SYNERGY_HOME=str(work / "home"),
               SYNERGY_DATA=str(work.parent / "data"),
               SYNERGY_DECISIONS=str(work / "decisions.tbl"),
               SYNERGY_FRESH_STEPS="1" if steps == "fresh" else "0")
    proc = subprocess.run([sys.executable, "-m", "slurm_synergy.cli", "submit", str(csv),
                           "--out", str(work / "jobs"), "--profile-only", "--sequential"],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    ids = [line.split("\t")[0] for line in proc.stdout.splitlines()]
    recs = wait(Slurm(), ids, timeout_s=3600)
    failed = [r for r in recs if r.state != "COMPLETED"]
    specs = load_jobs(csv)
    missing = [s.name for s in specs if not store.has(s.fingerprint)]
    if failed or missing:
        raise SystemExit(f"jobs not completed: {[(r.name, r.state) for r in failed]}; "
                         f"not profiled: {missing}; logs in {work / 'jobs' / 'logs'}")
    return [store.load(s.fingerprint) for s in specs]


def decided_already(specs: list[JobSpec]) -> None:
    """SystemExit if the cluster's decision table decides a workload of the suite: the
    shim would size its profiling job to the decision (one core, say), not as asked."""
    path = table_path()
    if not path.exists():
        return
    entries = entries_of(read(path)[1])
    known = [s.name for s in specs if s.fingerprint in entries]
    if known:
        raise SystemExit(f"{path} decides {', '.join(known)} already (a `make demo` of the "
                         "same workload?): the shim would size their profiling jobs to it. "
                         "Move it aside and run again.")


def decision_text(d: Decision | NoDecision) -> str:
    if isinstance(d, NoDecision):
        return f"none ({d.reasons[-1].removeprefix('no decision: ')[:60]})"
    noisy = any(r.startswith("noise:") for r in d.reasons)
    return f"{d.cpus}c {d.mem_mb}M" + (" (noise rule)" if noisy else "")


def decided(text: str) -> str:
    """What a decision gives, without the note of how it was reached."""
    return text.removesuffix(" (noise rule)")


def components(p: Profile) -> tuple[Point, Point, tuple[Point, Point] | None]:
    """A profile's input-only and compute-only points, and its one-core pair (the
    input-only step alone on one core, the compute-only step beside it) where it has one."""
    loader = max((pt for pt in p.points if pt.measure == "loader"), key=lambda pt: pt.cores)
    compute = next(pt for pt in p.points if pt.measure == "compute")
    alone = [pt for pt in p.points if pt.measure == "loader" and pt.cores == 1]
    beside = [pt for pt in p.points if pt.measure == "shared"]
    return loader, compute, (alone[0], beside[0]) if alone and beside else None


def figures(p: Profile, d: Decision | NoDecision) -> dict:
    loader, compute, _ = components(p)
    return {
        "samples_per_s": {str(pt.cores): round(pt.samples_per_s, 2)
                          for pt in p.train_points()},
        "runs": {str(pt.cores): [round(r, 2) for r in pt.repeats] for pt in p.train_points()},
        "spread": {str(pt.cores): None if pt.spread is None else round(pt.spread, 4)
                   for pt in p.train_points()},
        "input_only": {"runs": [round(r, 2) for r in loader.repeats or (loader.samples_per_s,)],
                       "spread": None if loader.spread is None else round(loader.spread, 4)},
        "compute_only": {"runs": [round(r, 2) for r in compute.repeats or
                                  (compute.samples_per_s,)],
                         "spread": None if compute.spread is None else round(compute.spread, 4),
                         "cpu_ms": round(compute.host_cpu_s_per_sample * 1e3, 3)},
        # The trainer's CPU time per sample in each count's runs, against compute-only's:
        # above it where the loader's worker shares the trainer's core and caches.
        "trainer_cpu_ms": {str(pt.cores): round(pt.host_cpu_s_per_sample * 1e3, 3)
                           for pt in p.train_points()},
        "prep_core_ms": round(p.model.prep_core_s * 1e3, 3),
        # Input and training on one shared core (the one-core pair), against p + h apart.
        "shared_core_ms": None if p.model.shared_core_s is None else
        round(p.model.shared_core_s * 1e3, 3),
        "host_core_ms": round(p.model.host_core_s * 1e3, 3),
        "held_out": [{"cores": e.cores, "measured": round(e.measured, 2),
                      "predicted": round(e.predicted, 2), "error": round(e.error, 4),
                      "noise": round(e.noise or 0.0, 4)}
                     for e in p.model.held_out],
        # The same points' errors with the components apart (no one-core pair).
        "held_out_apart": [round(e.error, 4) for e in refitted(p, pair=False).model.held_out],
        "mean_error": p.model.mean_error,
        "mean_noise": p.model.mean_noise,
        "decision": decision_text(d),
        "profiling_s": p.profiling_s,
        "share_of_1h_job": round(p.profiling_s / JOB_HOUR_S, 4),
    }


def refitted(p: Profile, pair: bool = True) -> Profile:
    """The profile's model fitted again from its kept points by this checkout's fit, so
    that a change of the model is measured on profiles already taken; without the
    one-core pair where `pair` is false (the components apart, side by side with it)."""
    loader, compute, shared = components(p)
    model = fit_components(loader, compute, p.train_points(),
                           on_gpu=p.model.device_rate is not None, fetch=p.model.fetch,
                           shared=shared if pair else None)
    return replace(p, model=model)


def stability_markdown(names: list[str], rounds: list[list[dict]]) -> str:
    lines = ["| workload | round | samples/s by cores (median ±spread of runs) | input-only "
             "runs | compute-only runs | trainer CPU ms/sample by cores (compute-only) | "
             "model error, held out (± what the runs' noise could make) | decision | cost |",
             "|---|---|---|---|---|---|---|---|---|"]
    def by_cores(d: dict) -> list[tuple[str, float]]:
        return sorted(d.items(), key=lambda x: int(x[0]))
    for i, name in enumerate(names):
        for r, results in enumerate(rounds, 1):
            f = results[i]
            pts = "  ".join(f"{k}c {v:.1f}" + (f" ±{f['spread'][k]:.1%}"
                                               if f["spread"][k] is not None else "")
                            for k, v in by_cores(f["samples_per_s"]))
            err = ", ".join(f"{e['cores']}c {e['error']:.1%} (±{e['noise']:.1%})"
                            for e in sorted(f["held_out"], key=lambda e: e["cores"])) or "-"
            def runs_text(part: dict) -> str:
                return ", ".join(f"{v:.1f}" for v in part.get("runs", [])) + (
                    f" (±{part['spread']:.1%})" if part.get("spread") is not None else "")
            comp = f.get("compute_only", {})
            comp_text, load_text = runs_text(comp), runs_text(f.get("input_only", {}))
            cpu = ", ".join(f"{k}c {v:.2f}" for k, v in by_cores(f.get("trainer_cpu_ms", {})))
            cpu += f" ({comp['cpu_ms']:.2f})" if "cpu_ms" in comp else ""
            lines.append(f"| {name if r == 1 else ''} | {r} | {pts} | {load_text or '-'} | "
                         f"{comp_text or '-'} | "
                         f"{cpu or '-'} | {err} | {f['decision']} | "
                         f"{f['profiling_s']:.0f}s ({f['share_of_1h_job']:.1%} of 1 h) |")
    held = [e for results in rounds for f in results for e in f["held_out"]]
    if held:
        errs = sorted(e["error"] for e in held)
        lines.append("")
        lines.append(f"Held-out points: {len(held)}; error {errs[0]:.1%}-{errs[-1]:.1%}, "
                     f"median {errs[len(errs) // 2]:.1%}; at or under 5%: "
                     f"{sum(e['error'] <= 0.05 for e in held)}; at or under 5% or what the runs' "
                     f"noise could make: {sum(e['error'] <= max(0.05, e['noise']) for e in held)}.")
        apart = sorted(e for results in rounds for f in results
                       for e in f.get("held_out_apart", []))
        if apart and any(f.get("shared_core_ms") for results in rounds for f in results):
            lines.append(f"The same points with the components apart (no one-core pair): "
                         f"error {apart[0]:.1%}-{apart[-1]:.1%}, median "
                         f"{apart[len(apart) // 2]:.1%}; at or under 5%: "
                         f"{sum(e <= 0.05 for e in apart)}.")
        lines += ["", per_workload_markdown(names, rounds)]
    lines.append("")
    for what, key in (("decision (cores and memory)", decided),
                      ("cores", lambda text: decided(text).split(" ")[0])):
        same = [n for i, n in enumerate(names)
                if len({key(results[i]["decision"]) for results in rounds}) == 1]
        lines.append(f"Same {what} in all {len(rounds)} rounds: {len(same)} of {len(names)} "
                     f"workloads" + (f" (not: {', '.join(n for n in names if n not in same)})"
                                     if len(same) < len(names) else "") + ".")
    return "\n".join(lines)


def per_workload_markdown(names: list[str], rounds: list[list[dict]]) -> str:
    """Each workload's held-out error over all its rounds, beside what the runs' noise
    could make of it: the figure the model is judged by, and the spread that limits it."""
    lines = ["| workload | held-out points | error, mean (max) | noise could make, mean | "
             "points above 5% and their noise | mean without the one-core pair |",
             "|---|---|---|---|---|---|"]
    for i, name in enumerate(names):
        held = [e for results in rounds for e in results[i]["held_out"]]
        if not held:
            continue
        above = [f"{e['cores']}c {e['error']:.1%} (±{e['noise']:.1%})" for e in held
                 if e["error"] > max(0.05, e["noise"])]
        mean = sum(e["error"] for e in held) / len(held)
        noise = sum(e["noise"] for e in held) / len(held)
        apart = [e for results in rounds for e in results[i].get("held_out_apart", [])]
        lines.append(f"| {name} | {len(held)} | {mean:.1%} ({max(e['error'] for e in held):.1%})"
                     f" | {noise:.1%} | {', '.join(above) or 'none'} | "
                     + (f"{sum(apart) / len(apart):.1%} |" if apart else "- |"))
    return "\n".join(lines)


def cost_markdown(names: list[str], rounds: dict[str, list[list[dict]]],
                  modes: list[str]) -> str:
    """Each workload's cost per round under each way of starting steps, and the ratio,
    from profiles run side by side."""
    a, b = modes[0], modes[1]
    lines = [f"| workload | {a} steps (s) | {b} steps (s) | {a}/{b} |", "|---|---|---|---|"]
    ratios = []
    for i, name in enumerate(names):
        ca = [res[i]["profiling_s"] for res in rounds[a]]
        cb = [res[i]["profiling_s"] for res in rounds[b]]
        ratio = [x / y for x, y in zip(ca, cb)]
        ratios += ratio
        lines.append(f"| {name} | {', '.join(f'{c:.0f}' for c in ca)} | "
                     f"{', '.join(f'{c:.0f}' for c in cb)} | "
                     f"{', '.join(f'{q:.2f}' for q in ratio)} |")
    lines.append(f"\n{a}/{b} cost: {min(ratios):.2f}-{max(ratios):.2f}, median "
                 f"{sorted(ratios)[len(ratios) // 2]:.2f}.")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=ROOT / "jobs_csv" / "profile_suite.csv")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--rounds", type=int, default=3,
                        help="times to profile the suite from scratch (default %(default)s)")
    parser.add_argument("--steps", default="warm",
                        help="how the profiles' steps start, comma-separated to compare: "
                        "warm (forks of one interpreter), fresh (a new process each); with "
                        "both, each round profiles the suite both ways, in alternating order "
                        "(default %(default)s)")
    parser.add_argument("--decide-only", action="store_true",
                        help="fit the model and decide again from the rounds' kept "
                        "profile stores (after a change of model, policy or engine), "
                        "profiling nothing")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF") or paths.on_local_cluster():
        LocalCluster(sync_every_s=0).up(log=lambda line: print(line, file=sys.stderr))
    shape = node_shape(Slurm())
    policy = load_policy(policy_path())
    catalog = site_catalog(policy_path())
    specs = load_jobs(args.csv)
    names = [s.name for s in specs]
    if not args.decide_only:
        decided_already(specs)
    modes = args.steps.split(",")
    if not modes or any(m not in ("warm", "fresh") for m in modes):
        parser.error(f"--steps {args.steps}: warm, fresh or both")
    first: list[Profile] = []
    rounds: dict[str, list[list[dict]]] = {m: [] for m in modes}
    for r in range(1, args.rounds + 1):
        for mode in modes if r % 2 else modes[::-1]:
            work = args.results / "profiles-run" / f"round{r}" / mode
            if args.decide_only:
                store = ProfileStore(user_folder(work / "store"))
                profiles = [refitted(store.load(spec.fingerprint))
                            for spec in load_jobs(args.csv)]
            else:
                profiles = profile_round(args.csv, work, mode)
            if mode == modes[0]:
                first = first or profiles
            results = []
            for p in profiles:
                try:
                    d: Decision | NoDecision = decide(p, shape, policy, catalog)
                except NoDecision as e:
                    d = e
                results.append(figures(p, d))
            rounds[mode].append(results)
            print(f"round {r} ({mode} steps): " + ", ".join(
                f"{n} {f['decision']} {f['profiling_s']:.0f}s" for n, f in zip(names, results)),
                file=sys.stderr)
    png = plot(first, args.results / "profiles.png")
    table = "\n\n".join((f"{m} steps:\n\n" if len(modes) > 1 else "")
                         + stability_markdown(names, rounds[m]) for m in modes)
    if len(modes) > 1:
        table += "\n\n" + cost_markdown(names, rounds, modes)
    (args.results / "profiles.md").write_text(markdown(first) + "\n\n" + table + "\n")
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "host": platform.node(), "cpus": os.cpu_count(), "csv": str(args.csv),
              "node": shape.describe(), "policy": str(policy_path()),
              "steps": {m: [{"profiles": [{"workload": n, **f} for n, f in zip(names, res)]}
                            for res in rounds[m]] for m in modes}}
    (args.results / "profiles.json").write_text(json.dumps(report, indent=2) + "\n")
    print(table)
    print(f"written: {args.results / 'profiles.json'}, {args.results / 'profiles.md'}, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
