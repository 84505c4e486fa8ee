"""The site's sync under attack by ordinary users of its shared store: for each attack,
what the victim's decision becomes, whether sync ends, what it names, how long it takes
and how big the table it writes is; this checkout and, with --against, another one (the
release before), each through its own `synergy plugin sync` run as root, as cron runs it.

Two real users (made here, with associations on the local cluster, and removed after)
share a store of mode 1777; the victim has one profile. Each attack
is what the attacker can do by hand: a forgery of the victim's workload, folders whose
names pass for uids, a FIFO, deep JSON, a sparse giant, a link to /dev/zero, 200,000
files, profiles of absurd values (in folders of four more uids, enough to push a table
past the shim's 16 MiB), 2,000 profiles of about 1 MB each, a forgery shared through
share_group, and what a careless victim's folder allows. Needs root and the local cluster
(make cluster). Writes bench/results/store.md and store.json.

    .venv/bin/python bench/bench_store.py [--rounds 2] [--against /path/to/older/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy.model.profile import (Allocation, GpuReadings, Point,  # noqa: E402
                                         Profile, ThroughputModel)
from slurm_synergy.slurm import Slurm  # noqa: E402
from slurm_synergy.cluster.users import ensure_user  # noqa: E402

FP = "0123456789abcdef"
USERS = ("synergy-bench-attacker", "synergy-bench-victim")
ACCOUNT = "synergy-bench"
GROUP = "synergy-bench-lab"
SHIM_MAX_BYTES = 16 * 1024 * 1024
FAKE_UIDS = (60001, 60002, 60003, 60004)


def profile(one_core_rate: float = 60.0, fp: str = FP, points: int = 0) -> Profile:
    """The victim's workload (2 cores clearly faster than 1 at 60/s); `points` more
    repeats of its 2-core point make it heavy."""
    two = Point("train", 2, 1, 4096, 100.0, 0.2, 0.01, 900.0, 12.0, repeats=(100.0, 99.0, 101.0))
    pts = (two, Point("train", 1, 1, 4096, one_core_rate, 0.5, 0.01, 850.0, 14.0,
                      repeats=(one_core_rate,) * 3)) + (two,) * points
    model = ThroughputModel("components", 0.0125, 0.006, None, 900.0, None)
    return Profile(fp, "victim-job", ("train.py",), 64, Allocation(2, 4096, 0, "n1", "srun", "7"),
                   pts, model, GpuReadings(False), "t0", "t1", 30.0, "bench")


def owned(path: Path, uid: int) -> None:
    os.chown(path, uid, uid, follow_symlinks=False)


def folder(site: Path, name: str, uid: int, mode: int = 0o700) -> Path:
    path = site / name
    path.mkdir(mode=mode)
    path.chmod(mode)
    owned(path, uid)
    return path


def put(where: Path, name: str, uid: int, text: str) -> None:
    path = where / name
    path.write_text(text)
    owned(path, uid)


class Attacks:
    """Each attack as a function of the store; the uids come from the system."""

    def __init__(self) -> None:
        self.attacker, self.victim = (pwd.getpwnam(u).pw_uid for u in USERS)

    def forged(self) -> str:
        return profile(600.0).to_json()

    def wild(self, fp: str) -> str:
        data = json.loads(profile(fp=fp).to_json())
        data["allocation"]["procs"] = int("9" * 4299)
        data["points"][0]["workers"] = int("9" * 4299)
        return json.dumps(data)

    def own(self, site: Path) -> Path:
        return site / str(self.attacker)

    def forged_in_own(self, site: Path) -> None:
        put(self.own(site), f"{FP}.json", self.attacker, self.forged())

    def forged_in_0777(self, site: Path) -> None:
        victim = site / str(self.victim)
        victim.chmod(0o777)
        put(victim, f"{FP}.json.tmp", self.attacker, self.forged())
        os.replace(victim / f"{FP}.json.tmp", victim / f"{FP}.json")

    def superscript(self, site: Path) -> None:
        folder(site, "\u00b9", self.attacker)

    def aliases(self, site: Path) -> None:
        uid = str(self.attacker)
        for name in ("0" + uid, "00" + uid, "".join(chr(0xFF10 + int(c)) for c in uid)):
            where = folder(site, name, self.attacker)
            put(where, f"{FP}.json", self.attacker, self.forged())
            put(where, "fedcba9876543210.json", self.attacker, self.wild("fedcba9876543210"))

    def past_the_table(self, site: Path) -> None:
        for uid in FAKE_UIDS:
            where = folder(site, str(uid), uid)
            for n in range(2000):
                put(where, f"{n:016x}.json", uid, self.wild(f"{n:016x}"))

    def heavy(self, site: Path) -> None:
        """In the attacker's folder, and linked into a zero-padded alias of it, which
        sorts before every real uid (as names sort)."""
        text = profile(points=2900, fp="HEAVYFINGERPRINT").to_json()
        text = json.dumps(json.loads(text))       # compact: about 1 MB
        alias = folder(site, "0" + str(self.attacker), self.attacker)
        for n in range(2000):
            put(self.own(site), f"{n:016x}.json", self.attacker,
                text.replace("HEAVYFINGERPRINT", f"{n:016x}"))
            os.link(self.own(site) / f"{n:016x}.json", alias / f"{n:016x}.json")

    def fifo(self, site: Path) -> None:
        path = self.own(site) / "fedcba9876543210.json"
        os.mkfifo(path)
        owned(path, self.attacker)

    def deep(self, site: Path) -> None:
        put(self.own(site), "fedcba9876543210.json", self.attacker, "[" * 500000 + "]" * 500000)

    def sparse(self, site: Path) -> None:
        path = self.own(site) / "fedcba9876543210.json"
        with open(path, "wb") as fh:
            fh.truncate(50 << 30)
        owned(path, self.attacker)

    def flood(self, site: Path) -> None:
        for n in range(200000):
            os.close(os.open(self.own(site) / f"{n:016x}.json", os.O_CREAT | os.O_WRONLY, 0o600))
        subprocess.run(["chown", "-R", f"{self.attacker}:{self.attacker}", str(self.own(site))],
                       check=True)

    def planted(self, site: Path) -> None:
        shutil.rmtree(site / str(self.victim))
        squat = folder(site, str(self.victim), self.attacker, 0o755)
        put(squat, f"{FP}.json", self.attacker, self.forged())

    def table(self) -> dict[str, tuple[Callable[[Path], None], bool]]:
        """Each attack, and whether it needs the share_group policy."""
        return {
            "none (clean store)": (lambda site: None, False),
            "a superscript one as a folder name": (self.superscript, False),
            "alias folders (0uid, 00uid, full-width digits), each a forgery and absurd values":
                (self.aliases, False),
            "absurd values (4,300-digit counts) in 8,000 profiles of four more uids":
                (self.past_the_table, False),
            "2,000 profiles of about 1 MB (2,900 points) each, in the attacker's folder and a "
            "zero-padded alias of it": (self.heavy, False),
            "forgery of the victim's workload in the attacker's folder": (self.forged_in_own, False),
            "the same forgery shared through share_group": (self.forged_in_own, True),
            "FIFO named *.json": (self.fifo, False),
            "JSON nested 500,000 deep": (self.deep, False),
            "sparse 50 GB file": (self.sparse, False),
            "200,000 files": (self.flood, False),
            "forgery over the victim's own, their folder left at 0777": (self.forged_in_0777, False),
            "folder planted under the victim's uid before their first profile":
                (self.planted, False),
        }


def users(slurm: Slurm) -> list[str]:
    """The two users, with associations and a group; those made here, to remove after."""
    made = [name for name in USERS if ensure_user(slurm, name, ACCOUNT)]
    subprocess.run(["groupadd", "--force", GROUP], check=True)
    for name in USERS:
        subprocess.run(["gpasswd", "--add", name, GROUP], check=True, capture_output=True)
    return made


def remove(made: list[str]) -> None:
    subprocess.run(["groupdel", GROUP], check=False)
    for name in made:
        subprocess.run(["userdel", name], check=False)


def sync(tree: Path, site: Path, table: Path, policy: Path) -> dict:
    """That tree's `synergy plugin sync`, as root's cron runs it."""
    env = {**os.environ, "PYTHONPATH": str(tree), "SYNERGY_PROFILES": str(site),
           "SYNERGY_POLICY": str(policy)}
    start = time.monotonic()
    # From / : a Python started in a checkout imports that checkout's package first.
    ran = subprocess.run([sys.executable, "-m", "slurm_synergy.cli", "plugin", "sync",
                          "--table", str(table)], capture_output=True, text=True, env=env,
                         timeout=900, cwd="/")
    return {"rc": ran.returncode, "seconds": round(time.monotonic() - start, 2),
            "said": (ran.stdout + ran.stderr)[-600:]}


def victims_entry(table: Path, uid: int) -> str:
    """The victim's line of a table of either format, as cores and MB; what the shim
    does where the table is past its size."""
    if not table.exists():
        return "no table written"
    if table.stat().st_size > SHIM_MAX_BYTES:
        return f"none: the table is {table.stat().st_size >> 20} MiB, the shim reads none of it"
    for line in table.read_text().splitlines()[1:]:
        words = line.split()
        if words[:2] == [str(uid), FP]:
            shared = len(words) == 10 and words[9] == "1"      # format 4's last column
            return f"{words[2]}c {words[3]}M" + (" (shared: grows only)" if shared else "")
    return "none (measured again)"


def one(tree: Path, attack: Callable[[Path], None], lab: bool, work: Path,
        attacks: Attacks) -> dict:
    site = work / "profiles"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    site.chmod(0o1777)
    victim = folder(site, str(attacks.victim), attacks.victim)
    put(victim, f"{FP}.json", attacks.victim, profile().to_json())
    folder(site, str(attacks.attacker), attacks.attacker)
    if lab:
        os.remove(victim / f"{FP}.json")
    attack(site)
    policy = work / "policy.toml"
    text = (tree / "etc" / "policy.toml").read_text()
    policy.write_text(text.replace('share_group = ""', f'share_group = "{GROUP}"') if lab
                      else text)
    table = work / "synergy-decisions.tbl"
    table.unlink(missing_ok=True)
    out = sync(tree, site, table, policy)
    out.update(victim=victims_entry(table, attacks.victim) if out["rc"] == 0 else
               "sync fails: the table is never rewritten",
               table_bytes=table.stat().st_size if table.exists() else 0)
    shutil.rmtree(site, ignore_errors=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--against", type=Path, help="another checkout: the before column")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--only", nargs="*", default=[], help="attacks whose names hold these words")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_store gives files to other uids: run it as root")
    slurm = Slurm()
    if not slurm.ping():
        raise SystemExit("the local cluster is not up: make cluster")
    made = users(slurm)
    attacks = Attacks()
    chosen = {k: v for k, v in attacks.table().items()
              if not args.only or any(w in k for w in args.only)}
    trees = {"before": args.against.resolve()} if args.against else {}
    trees["after"] = ROOT
    work = Path(tempfile.mkdtemp(prefix="synergy-bench-store-", dir="/var/tmp"))
    work.chmod(0o755)
    runs: dict[str, dict[str, list[dict]]] = {k: {t: [] for t in trees} for k in chosen}
    try:
        for _ in range(args.rounds):
            for name, (attack, lab) in chosen.items():
                for label, tree in trees.items():
                    runs[name][label].append(one(tree, attack, lab, work, attacks))
                    print(f"{name} [{label}]: {runs[name][label][-1]}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        remove(made)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "store.json").write_text(json.dumps(
        {"at": when, "trees": {k: str(v) for k, v in trees.items()}, "runs": runs},
        indent=1) + "\n")
    head = " | ".join(f"{t}: victim's decision | {t}: sync exit, s (min-max)" for t in trees)
    lines = [f"The site's sync under attack, {args.rounds} round(s) each, trees interleaved "
             f"({when}; `bench/bench_store.py`"
             + (f" --against {trees['before']}" if args.against else "") + "):", "",
             f"| attack | {head} |", "|---|" + "---|---|" * len(trees)]
    for name, by_tree in runs.items():
        cells = []
        for label in trees:
            rs = by_tree[label]
            secs = [r["seconds"] for r in rs]
            rcs = sorted({r["rc"] for r in rs})
            cells += [" / ".join(sorted({r["victim"] for r in rs})),
                      f"{','.join(map(str, rcs))}, {statistics.median(secs):.1f} "
                      f"({min(secs):.1f}-{max(secs):.1f})"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    (args.out / "store.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
