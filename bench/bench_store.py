"""Compiling the decision table from a site's shared store while users attack it: for
each hostile file, the victim's decision, what sync's log names, and how long the
compile took, beside a clean store measured in the same run (rounds interleaved).

A site store (mode 1777) holds the victim's folder (uid 1000, one profile) and the
attacker's (uid 1001); each attack puts one thing where the attacker can write it, or
where a careless victim let them. Needs root (it gives files to those uids). Writes
bench/results/store.md and bench/results/store.json.

    make bench          # or: .venv/bin/python bench/bench_store.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy.model.engine import NodeShape  # noqa: E402
from slurm_synergy.model.policy import Policy  # noqa: E402
from slurm_synergy.model.profile import (Allocation, GpuReadings, Point,  # noqa: E402
                                         Profile, ThroughputModel)
from slurm_synergy.profiles import ProfileStore, user_folder, user_stores  # noqa: E402
from slurm_synergy.decisions.table import compile_decisions  # noqa: E402

VICTIM, ATTACKER = 1000, 1001
FP = "0123456789abcdef"
SHAPE = NodeShape(16, 64000, 4)


def profile(one_core_rate: float = 60.0) -> Profile:
    points = (Point("train", 2, 1, 4096, 100.0, 0.2, 0.01, 900.0, 12.0,
                    repeats=(100.0, 99.0, 101.0)),
              Point("train", 1, 1, 4096, one_core_rate, 0.5, 0.01, 850.0, 14.0,
                    repeats=(one_core_rate,) * 3))
    model = ThroughputModel("components", 0.0125, 0.006, None, 900.0, None)
    return Profile(FP, "victim-job", ("train.py",), 64, Allocation(2, 4096, 0, "n1", "srun", "7"),
                   points, model, GpuReadings(False), "t0", "t1", 30.0, "bench")


def owned(path: Path, uid: int) -> None:
    os.chown(path, uid, uid, follow_symlinks=False)


def folder(site: Path, uid: int, owner: int | None = None, mode: int = 0o700) -> Path:
    path = user_folder(site, uid)
    path.mkdir(mode=mode)
    path.chmod(mode)
    owned(path, uid if owner is None else owner)
    return path


def save(where: Path, uid: int, p: Profile) -> None:
    path = ProfileStore(where, 0).save(p)
    owned(path, uid)


def forged_in_0777(site: Path) -> None:
    victim = site / str(VICTIM)
    victim.chmod(0o777)
    save(victim, ATTACKER, profile(600.0))


def forged_in_own(site: Path) -> None:
    save(site / str(ATTACKER), ATTACKER, profile(600.0))


def planted_folder(site: Path) -> None:
    shutil.rmtree(site / str(VICTIM))
    squat = folder(site, VICTIM, owner=ATTACKER, mode=0o755)
    save(squat, ATTACKER, profile(600.0))


def store_left_0777(site: Path) -> None:
    """No sticky bit: the attacker can move the victim's folder aside and put one of
    their own under the victim's uid."""
    site.chmod(0o777)
    (site / str(VICTIM)).rename(site / ".moved")
    save(folder(site, VICTIM, owner=ATTACKER, mode=0o755), ATTACKER, profile(600.0))


def fifo(site: Path) -> None:
    path = site / str(ATTACKER) / "fedcba9876543210.json"
    os.mkfifo(path)
    owned(path, ATTACKER)


def deep_json(site: Path) -> None:
    path = site / str(ATTACKER) / "fedcba9876543210.json"
    path.write_text("[" * 500000 + "]" * 500000)
    owned(path, ATTACKER)


def sparse(site: Path) -> None:
    path = site / str(ATTACKER) / "fedcba9876543210.json"
    with open(path, "wb") as fh:
        fh.truncate(50 << 30)
    owned(path, ATTACKER)


def dev_zero(site: Path) -> None:
    path = site / str(ATTACKER) / "fedcba9876543210.json"
    path.symlink_to("/dev/zero")
    owned(path, ATTACKER)


def flood(site: Path) -> None:
    where = site / str(ATTACKER)
    for n in range(200000):
        os.close(os.open(where / f"{n:016x}.json", os.O_CREAT | os.O_WRONLY, 0o600))


ATTACKS: dict[str, Callable[[Path], None]] = {
    "none (clean store)": lambda site: None,
    "forged profile, victim's folder left at 0777": forged_in_0777,
    "forged profile of the victim's workload, in the attacker's folder": forged_in_own,
    "folder planted under the victim's uid before their first profile": planted_folder,
    "store left at 0777: the victim's folder moved aside, the attacker's in its place":
        store_left_0777,
    "FIFO named *.json": fifo,
    "JSON nested 500,000 deep": deep_json,
    "sparse 50 GB file": sparse,
    "link to /dev/zero": dev_zero,
    "200,000 files": flood,
}


def one(attack: Callable[[Path], None], work: Path) -> dict:
    site = work / "profiles"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    site.chmod(0o1777)
    save(folder(site, VICTIM), VICTIM, profile())
    folder(site, ATTACKER)
    attack(site)
    start = time.monotonic()
    stores, skipped = user_stores(site)
    made, left_out = compile_decisions(stores, SHAPE, Policy())
    seconds = time.monotonic() - start
    victim = [f"{d.cpus}c {d.mem_mb}M" for uid, d in made if uid == VICTIM]
    return {"victim": victim[0] if victim else "none (measured again)",
            "entries": len(made), "named": len(skipped + left_out),
            "first_named": (skipped + left_out)[:1], "seconds": seconds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_store gives files to other uids: run it as root")
    work = Path(tempfile.mkdtemp(prefix="synergy-bench-store-"))
    runs: dict[str, list[dict]] = {name: [] for name in ATTACKS}
    try:
        for _ in range(args.rounds):
            for name, attack in ATTACKS.items():
                runs[name].append(one(attack, work))
    finally:
        shutil.rmtree(work)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "store.json").write_text(json.dumps({"at": when, "runs": runs}, indent=1) + "\n")
    lines = [f"Compiling a site store under attack, {args.rounds} rounds interleaved ({when}; "
             "`bench/bench_store.py`):", "",
             "| attack | victim's decision | entries | named in sync's log | compile s, median (min-max) |",
             "|---|---|---|---|---|"]
    for name, rs in runs.items():
        secs = [r["seconds"] for r in rs]
        victims = sorted({r["victim"] for r in rs})
        lines.append(f"| {name} | {' / '.join(victims)} | {rs[0]['entries']} | "
                     f"{rs[0]['named']} | {statistics.median(secs):.3f} "
                     f"({min(secs):.3f}-{max(secs):.3f}) |")
    (args.out / "store.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
