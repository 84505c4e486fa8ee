"""Forged lines against root's time-limit timer, on the local cluster, as ordinary users:
what each line-break class of Python's splitlines() makes root's rounds do.

For each class an attacker (bob) writes, behind that line break in his own jobs'
comments, well-formed lines of the text forms root's readers used: squeue's (comment
first) naming a victim's (alice's) two-day job as pending, then as running on a lowered
limit near its end; sacct's naming a run of another of alice's workloads that ran out of
time (which blocks its predictions); and both naming a job of his own, to have its limit
raised past his own --time. Root runs its rounds (--round: the command, default this
checkout's `synergy plugin timelimits`), and every job is read back from Slurm:

  victim time_min     the victim's job was given a --time-min
  victim limit        the victim's two days were cut (to the forged 3 minutes)
  prediction blocked  alice's workload got no --time-min though her history gives one
  own limit raised    bob's job's limit went past the 2 minutes he asked

Writes DIR/attack.json and DIR/attack.md (a row per class); a few minutes.

    .venv/bin/python bench/bench_attack.py [--out DIR] [--round 'CMD ...']
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.model import comment as comment_format  # noqa: E402
from slurm_synergy.slurm import SEP, Slurm  # noqa: E402
from tenant import add_round_option, as_user, round_argv, sbatch, script, tenants  # noqa: E402

ALICE, BOB = "synergy-alice", "synergy-bob"
LINE_BREAKS = {"LF": "\n", "CR": "\r", "CRLF": "\r\n", "VT": "\x0b", "FF": "\x0c",
               "FS": "\x1c", "GS": "\x1d", "RS": "\x1e", "NEL": "\x85", "LS": "\u2028",
               "PS": "\u2029"}

def limits(slurm: Slurm, job: str) -> tuple[str, str]:
    """(TimeLimit, MinTime) as squeue prints them, no text of any user's."""
    out = slurm.run(["squeue", "--noheader", f"--jobs={job}", "--states=all",
                     "--Format=TimeLimit:20|,MinTime:20|"]).split("|")
    return out[0].strip(), out[1].strip()


def queue_line(fp: str, job: str, uid: int, state: str, limit: str, used: str) -> str:
    return SEP.join((f"synergy:fp={fp}", job, str(uid), state, limit, used, "1"))


def history_lines(fp: str, uid: int, job: str) -> str:
    """The old sacct form's run of `fp` that ran out of time (it blocks `fp`'s predictions)
    and today's bracketed form giving `job`, `fp`'s one run, another key (it leaves `fp`
    without history)."""
    return "\n".join((SEP.join((f"synergy:fp={fp}", "", "999999", str(uid), "TIMEOUT", "5", "1")),
                      SEP.join((job, "synergy:fp=ffffffffffffffff", "", job))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    add_round_option(ap)
    args = ap.parse_args()
    LocalCluster(sync_every_s=0).up(log=lambda line: None)
    slurm = Slurm()
    with tenants(slurm, (ALICE, BOB), ROOT) as shared:
        result = attack(slurm, shared, args.round)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "attack.json").write_text(json.dumps(result, indent=1) + "\n")
    yes = {True: "yes", False: "no"}
    lines = ["| class | victim's job given a time_min | victim's 2 days cut | "
             "prediction blocked | own limit past --time |", "|---|---|---|---|---|"]
    lines += [f"| {r['class']} | {yes[r['victim_time_min']]} | "
              f"{yes[r['victim_limit_cut']]} ({r['victim_limit']}) | "
              f"{yes[r['prediction_blocked']]} | {yes[r['own_limit_raised']]} "
              f"({r['own_limit']}) |" for r in result["rows"]]
    (args.out / "attack.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print("\n".join(result["rounds"]))
    return 0


def attack(slurm: Slurm, shared: Path, round_command: str) -> dict:
    """The attack, class by class, and what Slurm says of each job after root's rounds."""
    policy = shared / "policy.toml"
    policy.write_text((ROOT / "etc" / "policy.toml").read_text().replace(
        "time_min_floor_min = 2", "time_min_floor_min = 1"))
    policy.chmod(0o644)
    state = shared / "root" / "time-limits.json"
    one_round = round_argv(round_command, state)
    env = dict(os.environ, SYNERGY_POLICY=str(policy),
               SYNERGY_DECISIONS=str(shared / "root" / "synergy-decisions.tbl"))
    alice, bob = (int(as_user(u, ["id", "-u"], shared)) for u in (ALICE, BOB))
    ids: list[str] = []
    rows = []
    try:
        scripts = {name: script(shared, name, shared.name)
                   for name in ["victim", "bob", "a", *LINE_BREAKS]}
        # alice: a workload with history ("a"), and one per class, each with one
        # completed run and a job waiting for a --time-min; her victims, two days each.
        hist = {n: sbatch(ALICE, shared, scripts[n], "--partition=gpu", "--time=20")
                for n in ["a", *LINE_BREAKS]}
        ids += hist.values()
        wait(slurm, list(hist.values()))
        fps = {n: comment_format.fingerprint(slurm.comment(j)) for n, j in hist.items()}
        waiting = {n: sbatch(ALICE, shared, scripts[n], "--partition=gpu", "--time=20",
                             "--hold") for n in LINE_BREAKS}
        victims = {n: sbatch(ALICE, shared, scripts["victim"], "--partition=gpu",
                             "--time=2-0", "--hold") for n in LINE_BREAKS}
        own = {n: sbatch(BOB, shared, scripts["bob"], "--partition=gpu", "--time=2",
                         "--hold") for n in LINE_BREAKS}
        ids += [*waiting.values(), *victims.values(), *own.values()]
        # bob's history of his own workload, and his forged one of alice's.
        forgers = {n: sbatch(BOB, shared, scripts["bob"], "--partition=multi", "--time=5",
                             f"--comment=x{lb}{history_lines(fps[n], alice, hist[n])}{lb}y")
                   for n, lb in LINE_BREAKS.items()}
        ids += forgers.values()
        wait(slurm, list(forgers.values()))
        time.sleep(5)           # their comments reach slurmdbd with their ends
        # bob's workload with history: the forged lines of his own jobs name it.
        bob_fp = comment_format.fingerprint(slurm.comment(forgers["LF"]))
        carriers = {}
        for n, lb in LINE_BREAKS.items():
            forged = (f"x{lb}{queue_line(fps['a'], victims[n], alice, 'PENDING', '3:00', '0:00')}"
                      f"{lb}{queue_line(bob_fp or '', own[n], bob, 'PENDING', '10:00:00', '0:00')}"
                      f"{lb}y")
            carriers[n] = sbatch(BOB, shared, scripts["bob"], "--partition=gpu", "--time=5",
                                 "--hold", f"--comment={forged}")
        ids += carriers.values()
        first = subprocess.run(one_round, capture_output=True, text=True, env=env, cwd=shared)
        # Read after the first round: the old timer read sacct only for users with
        # jobs still waiting, so a block held while bob had one.
        blocked = {n: limits(slurm, waiting[n])[1] in ("0:00", "N/A") for n in LINE_BREAKS}
        for n, lb in LINE_BREAKS.items():
            forged = (f"x{lb}{queue_line(fps['a'], victims[n], alice, 'RUNNING', '2:00', '1:59')}"
                      f"{lb}{queue_line(bob_fp or '', own[n], bob, 'RUNNING', '3:00', '2:59')}"
                      f"{lb}y")
            as_user(BOB, ["scontrol", "update", f"JobId={carriers[n]}", f"Comment={forged}"],
                    shared)
        second = subprocess.run(one_round, capture_output=True, text=True, env=env, cwd=shared)
        time.sleep(1)
        for n in LINE_BREAKS:
            v_limit, v_min = limits(slurm, victims[n])
            o_limit, _ = limits(slurm, own[n])
            rows.append({"class": n, "victim_time_min": v_min not in ("0:00", "N/A"),
                         "victim_limit": v_limit, "victim_limit_cut": v_limit != "2-00:00:00",
                         "prediction_blocked": blocked[n],
                         "own_limit": o_limit, "own_limit_raised": o_limit != "2:00"})
    finally:
        slurm.cancel(ids)
    return {"round": one_round, "rounds": [first.stdout + first.stderr,
                                           second.stdout + second.stderr], "rows": rows,
            "slurm": slurm.version()}


if __name__ == "__main__":
    sys.exit(main())
