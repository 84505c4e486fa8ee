"""The user-script styles of tests/corpus (six loops, four frameworks' styles), measured
while they train and by the offline profiler, three rounds each, interleaved: the in-run
decision beside the offline one, where the offline profiler's own rounds agree.

Each round profiles the styles offline (--profile-only, one job after another) into a
fresh store, then submits them in the default flow (measured in the run, on_profiled =
continue) into another, each long enough for its sweep, and decides from every profile
with the site policy against this cluster's node, and under two other noise rules side
by side (bench_inrun.RULES). The rounds' stores stay in bench/results/styles-run;
--decide-only decides again from them, measuring nothing. Writes
bench/results/styles.md and bench/results/styles.json.

    make bench      # or: .venv/bin/python bench/bench_styles.py [--rounds 3] [--decide-only]
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent

from bench_inrun import (figures, inrun_round, kept_round, per_round, rate, ratio,  # noqa: E402
                         round_store, site_decider)
from bench_profiles import decided_already, profile_round  # noqa: E402
from profiler.datagen import ensure_image_dataset  # noqa: E402
from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.submission.csvjobs import load_jobs  # noqa: E402
from slurm_synergy.model.profile import Profile  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402

CORPUS = ROOT / "tests" / "corpus"
COLUMNS = "name,script,dataset,batch,workers,epochs,iterations,launcher,nproc,cpus,mem,time,args"


def styles_csv(data: Path, work: Path, only: Sequence[str] = ()) -> Path:
    """The styles as tests/integration/test_user_scripts.py submits them (those named in
    `only`, where it names some), each training about two minutes at two cores (measured
    2026-11-26; the hard-coded loop's 250 epochs 2026-11-28: its 75 ended inside the
    sweep's third window) so that its sweep fits."""
    images, inet, c = data / "images", data / "inet", CORPUS
    rows = [f"s-examples,{c}/examples_imagenet.py,,16,1,160,,,,2,3G,00:20:00,\"{inet} -p 64\"",
            f"s-synergy,{c}/synergy_contract.py,{images},16,1,,3600,,,2,3G,00:20:00,"
            "\"--epochs 1000 --log_interval 100\"",
            f"s-torchloader,{c}/torchloader_contract.py,{images},16,1,90,,,,2,3G,00:20:00,"
            "--arch resnet",
            f"s-plain,{c}/plain_loop.py,,,2,,,,,2,3G,00:20:00,250",
            f"s-dali,{c}/dali_cpu.py,,16,,300,,,,2,3G,00:20:00,\"{images} --threads 3\"",
            f"s-ddp,{c}/ddp_gloo.py,,16,1,50,,torchrun,2,2,3G,00:20:00,\"--print-freq 200\"",
            # Each framework's loop (issue 61): steps for about two minutes, a time cap.
            f"s-lightning,{c}/lightning_style.py,,,1,,,,,2,3G,00:20:00,\"6000 1 150\"",
            f"s-accelerate,{c}/accelerate_style.py,,,1,,,,,2,3G,00:20:00,\"15000 1 150\"",
            f"s-hf-trainer,{c}/hf_trainer_style.py,,,1,,,,,2,3G,00:20:00,\"6000 1 150\"",
            f"s-hand,{c}/hand_updates.py,,,,,,,,2,3G,00:20:00,\"30000 150\""]
    rows = [r for r in rows if not only or r.split(",", 1)[0] in only]
    work.mkdir(parents=True, exist_ok=True)
    path = work / "styles.csv"
    path.write_text("\n".join([COLUMNS, *rows]) + "\n")
    return path


def data_folder(root: Path) -> Path:
    """The corpus' JPEG folder, and the same under train/ for pytorch/examples' style."""
    ensure_image_dataset(root / "images", num_images=512, image_size=96)
    (root / "inet").mkdir(parents=True, exist_ok=True)
    if not (root / "inet" / "train").exists():
        (root / "inet" / "train").symlink_to(root / "images")
    return root


def kept_offline(folder: Path) -> list[Profile]:
    """An offline round's profiles from its kept store (profile_round's, under run/)."""
    csv = folder / "styles.csv"
    if not csv.exists():
        raise SystemExit(f"{folder}: no round kept there; run without --decide-only first")
    store = round_store(folder / "run")
    return [store.load(s.fingerprint) for s in load_jobs(csv) if store.has(s.fingerprint)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--decide-only", action="store_true",
                   help="decide again from the rounds' kept stores, measuring nothing")
    p.add_argument("--styles", type=lambda v: [n for n in v.split(",") if n], default=[],
                   help="only these styles (comma-separated names, e.g. s-plain)")
    args = p.parse_args()
    LocalCluster(sync_every_s=0).up(log=lambda line: None)
    work = args.out / "styles-run"
    data = data_folder(work / "corpus-data")
    if not args.decide_only:
        decided_already(load_jobs(styles_csv(data, work, args.styles)))
    decide = site_decider(Slurm())
    rows: dict[str, dict[str, list[dict]]] = {}
    for r in range(args.rounds):
        off_dir, in_dir = work / f"offline{r + 1}", work / f"inrun{r + 1}"
        if args.decide_only:
            offline, inrun = kept_offline(off_dir), kept_round(in_dir)
        else:
            offline = profile_round(styles_csv(data, off_dir, args.styles), off_dir / "run")
            inrun = inrun_round(in_dir, lambda into: styles_csv(data, into, args.styles))
        for how, profiles in (("offline", offline), ("inrun", inrun)):
            for profile in profiles:
                row = figures(profile, decide, r + 1)
                rows.setdefault(profile.job_name, {}).setdefault(how, []).append(row)
                print(f"round {r + 1} {how} {profile.job_name}: {row['decision']}",
                      flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    (args.out / "styles.json").write_text(json.dumps({"at": when, "styles": rows},
                                                     indent=1) + "\n")
    lines = [f"User-script styles, in the run and offline, {args.rounds} rounds from scratch "
             f"({when}; `bench/bench_styles.py`):", "",
             "| style | in-run 1 core ; 2 cores | 1c/2c in the run ; offline | in-run decision "
             "as profiled, per round | offline decision per round | same where offline agrees | "
             "unbounded noise rule, in-run ; offline | medians alone, in-run ; offline | "
             "lost, share of 1 h |", "|---|---|---|---|---|---|---|---|---|"]
    for name, both in rows.items():
        # As profiled: the offline profile is not followed (bench_inrun.as_profiled).
        inrun_d = [x["as_profiled"] for x in both["inrun"]]
        offline_d = [x["decision"] for x in both["offline"]]
        agree = len(set(offline_d)) == 1
        same = ("yes" if all(d == offline_d[0] for d in inrun_d) else "no") if agree \
            else "offline differs"
        lost = [x["lost_share_of_hour"] for x in both["inrun"]]
        lines.append(f"| {name} | {rate(both['inrun'], 1)} ; {rate(both['inrun'], 2)} | "
                     f"{ratio(both['inrun'])} ; {ratio(both['offline'])} | "
                     f"{per_round(both['inrun'], 'as_profiled')} | {per_round(both['offline'])} "
                     f"| {same} | "
                     f"{per_round(both['inrun'], 'unbounded')} ; "
                     f"{per_round(both['offline'], 'unbounded')} | "
                     f"{per_round(both['inrun'], 'medians')} ; "
                     f"{per_round(both['offline'], 'medians')} | "
                     f"{min(lost):.2%}-{max(lost):.2%} |")
    (args.out / "styles.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
