"""How right the run-time prediction behind --time-min is: predicted against actual elapsed,
on the user-script corpus and the built-in trainer, on real Slurm.

One ordinary user submits one job list three times, each batch once the one before has
ended: every style of tests/corpus (the rows test_user_scripts submits: pytorch/examples,
a hand-made loop, DALI on CPU, DDP under torchrun, the synergy and torchloader
contracts) and the built-in trainer as the built-in and as a user's script. Batch 1 is
the history (its first job of each row measured while it trains, then decided); batch 2
is the same list; batch 3 has twice the epochs or iterations wherever a row gives them,
so a prediction must scale by the job's known work. Right after each batch is submitted,
each job's prediction is made as root's time-limit timer makes it (decisions/timelimits.py:
the user's history of the key from sacct, the decision's bound, model/runtime.py), with
the shipped policy, and set on whatever is still pending; the table holds each job's
predicted and actual run, their ratio, and whether it ran past the --time-min the
prediction gives. Needs root and the local cluster; run it from a clone of its own with
nothing else running. Writes DIR/prediction.json and DIR/prediction.md.

    .venv/bin/python bench/bench_prediction.py [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_cluster import (PYTHON, USERS, as_user, bench_cluster, bench_policy,  # noqa: E402
                           fresh_cluster, give)
from profiler.datagen import ensure_image_dataset  # noqa: E402
from slurm_synergy.decisions.sync import compile_decisions  # noqa: E402
from slurm_synergy.decisions.service import DecisionService  # noqa: E402
from slurm_synergy.decisions.timelimits import (HISTORY_SINCE, history_of,  # noqa: E402
                                                predictions, slowdown)
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.profiles import stores_to_compile  # noqa: E402
from slurm_synergy.model.comment import time_min, work  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402
from slurm_synergy.site import Site  # noqa: E402
from tests.integration.test_user_scripts import COLUMNS, corpus_rows  # noqa: E402

USER = USERS[0]
BATCHES = ("history", "same", "twice the work")
# The test's rows run a few seconds, where a second of start-up is the error: their work
# times SCALE. Rows without an epochs or iterations column take theirs as arguments,
# the same in every batch (arguments are part of a workload's key), or as a column.
SCALE = 15
FIXED_WORK = {"u-plain": "40", "u-trainpy": " --max-iterations 150"}
COLUMN_WORK = {"u-builtin": 150}


def job_list(folder: Path, data: Path, batch: int, factor: int) -> Path:
    """Batch `batch`'s copy of the corpus's job list (a list and its --out folder are
    submitted once), sized to run tens of seconds rather than the test's few (its epochs
    and iterations times SCALE, the rows without either given theirs), and then its
    epochs and iterations times `factor`."""
    images = ensure_image_dataset(data / "images", num_images=512, image_size=96)
    if not (data / "inet" / "train").exists():
        (data / "inet").mkdir()
        (data / "inet" / "train").symlink_to(images)
    hungry = ensure_image_dataset(data / "hungry", num_images=256, image_size=512)
    rows = corpus_rows(images, data / "inet", hungry)
    text = COLUMNS + ",arch,depth\n" + "".join(
        row + (",resnet,8" if key == "as-builtin" else ",,") + "\n"
        for key, row in rows.items())
    table = list(csv.DictReader(io.StringIO(text)))
    for row in table:
        row["args"] += FIXED_WORK.get(row["name"], "")
        if row["name"] in COLUMN_WORK:
            row["iterations"] = str(COLUMN_WORK[row["name"]])
        for column in ("epochs", "iterations"):
            if row[column]:
                scale = 1 if row["name"] in COLUMN_WORK else SCALE
                row[column] = str(int(row[column]) * scale * factor)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(table[0]))
    writer.writeheader()
    writer.writerows(table)
    path = folder / f"jobs-{batch}.csv"
    path.write_text(out.getvalue())
    return path


def submit(folder: Path, jobs_csv: Path, store: Path, policy: Path) -> dict[str, str]:
    """The job list submitted as the user; job id -> row name."""
    out = folder / f"out-{jobs_csv.stem}"
    done = as_user(USER, [str(Path(PYTHON).parent / "synergy"), "submit", str(jobs_csv),
                          "--out", str(out)], folder, store, policy)
    if done.returncode:
        raise SystemExit(f"synergy submit {jobs_csv} failed: {done.stderr.strip()}")
    return {job: name for job, name in (line.split("\t") for line in done.stdout.splitlines())}


def predicted_now(slurm: Slurm, ids: dict[str, str]) -> dict[str, float]:
    """Each just-submitted job's predicted run, s, as root's time-limit timer predicts it."""
    service = DecisionService.for_site(Site.load(slurm))
    partition = slurm.default_partition()
    owned = compile_decisions(stores_to_compile()[0], service, partition).owned
    rates = {(o.uid, o.decision.fingerprint): (o.decision.cpus, slowdown(o))
             for o in owned if not o.shared}
    mine = [j for j in slurm.queued_texts() if j.job_id in ids]
    history = history_of(slurm.ended(HISTORY_SINCE, sorted({j.uid for j in mine})))
    rule = service.policy.time_rule
    return {job: p.seconds for job, p in predictions(mine, rates, history, rule).items()}


def ended(slurm: Slurm, ids: dict[str, str], batch: str,
          guess: dict[str, float]) -> list[dict]:
    """Each job of a batch as sacct has it, beside its prediction."""
    rows = slurm.sacct(list(ids), ("JobIDRaw", "State", "ElapsedRaw", "AllocCPUS",
                                   "Comment"))
    out = []
    for row in rows:
        jid = row["JobIDRaw"]
        if jid not in ids:
            continue
        elapsed = int(row["ElapsedRaw"] or 0)
        p = guess.get(jid, 0.0)
        tmin = time_min(row["Comment"])
        out.append({"batch": batch, "job_id": int(jid), "row": ids[jid],
                    "state": row["State"].split(" ")[0], "cpus": int(row["AllocCPUS"]),
                    "work": "".join(map(str, work(row["Comment"]) or ())),
                    "elapsed_s": elapsed, "predicted_s": round(p, 1),
                    "ratio": round(p / elapsed, 3) if p and elapsed else None,
                    "time_min_s": 60 * tmin[0] if tmin else 0})
    return sorted(out, key=lambda r: r["job_id"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    jobs: list[dict] = []
    with bench_cluster([USER], "bench-prediction") as (slurm, work_dir):
        data = work_dir / "data"
        data.mkdir()
        folder = work_dir / USER
        folder.mkdir()
        lists = [job_list(folder, data, b, factor) for b, factor in enumerate((1, 1, 2))]
        for path in [data, *data.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        give(USER, folder)
        store = work_dir / "store"
        store.mkdir()
        store.chmod(0o1777)
        policy = bench_policy(work_dir, "timemin")
        fresh_cluster(store, policy)
        for batch, jobs_csv in zip(BATCHES, lists):
            ids = submit(folder, jobs_csv, store, policy)
            guess = predicted_now(slurm, ids)
            wait(slurm, list(ids), timeout_s=3600)
            jobs += ended(slurm, ids, batch, guess)
            print(f"{batch}: jobs {min(ids, key=int)}-{max(ids, key=int)}",
                  file=sys.stderr)
    write(args.out, jobs)
    return 1 if any(j["state"] != "COMPLETED" for j in jobs) else 0


def write(out: Path, jobs: list[dict]) -> None:
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out.mkdir(parents=True, exist_ok=True)
    ratios = sorted(j["ratio"] for j in jobs if j["ratio"])
    past = [j for j in jobs if 0 < j["time_min_s"] < j["elapsed_s"]]
    given = [j for j in jobs if j["time_min_s"]]
    (out / "prediction.json").write_text(json.dumps({"at": when, "jobs": jobs}, indent=1)
                                         + "\n")
    lines = [f"Predicted against actual run, the corpus job list three times on the local "
             f"cluster ({when}; `bench/bench_prediction.py`).", "",
             "| batch | row | job | state | cores | work | elapsed s | predicted s | "
             "predicted / actual | time_min s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for j in jobs:
        lines.append(f"| {j['batch']} | {j['row']} | {j['job_id']} | {j['state']} | "
                     f"{j['cpus']} | {j['work'] or '-'} | {j['elapsed_s']} | "
                     f"{j['predicted_s'] or '-'} | {j['ratio'] or '-'} | "
                     f"{j['time_min_s'] or '-'} |")
    if ratios:
        lines += ["", f"Predicted over actual, {len(ratios)} jobs with a prediction: median "
                  f"{statistics.median(ratios):.2f}, min {ratios[0]:.2f}, max "
                  f"{ratios[-1]:.2f}; under 1 (ran longer than predicted): "
                  f"{sum(r < 1 for r in ratios)}."]
    lines += [f"Jobs the timer gave a time_min: {len(given)}; ran past it: {len(past)}"
              + (f" ({', '.join(str(j['job_id']) for j in past)})" if past else "") + "."]
    (out / "prediction.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
