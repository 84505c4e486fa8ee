"""What every Slurm query of the gateway must read from a cluster where three known jobs
stand, whatever the release: the same records from 22.05's output as from 24.11's and
26.05's. test_slurm_output.py (integration) submits the jobs and checks the live
cluster, and records what each command printed (`SYNERGY_RECORD_OUTPUT=<file>`);
test_slurm_recorded.py (unit) replays each release's recording, kept in tests/golden.

The jobs: HELD asks 2 cores, 1000 MB per node and one local1g GPU, held, with a comment
of the user's; RUNNING asks 1 core and 500 MB per CPU and sleeps; DONE ran `true`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from slurm_synergy.model.units import gpu_count, gpu_types
from slurm_synergy.slurm import Slurm

GOLDEN = Path(__file__).parent / "golden" / "slurm-output"
USER_COMMENT = "kept|by;the user"
SLEEP, TRUE = "#!/bin/bash\nsleep 120\n", "#!/bin/bash\ntrue\n"
# Each job's script and sbatch options (--chdir and --output are the test's).
JOBS = {
    "held": (SLEEP, ("--hold", "--cpus-per-task=2", "--mem=1000M", "--gres=gpu:local1g:1",
                     f"--comment={USER_COMMENT}", "--time=10", "--job-name=out-held")),
    "running": (SLEEP, ("--cpus-per-task=1", "--mem-per-cpu=500M", "--time=5",
                        "--job-name=out-running")),
    "done": (TRUE, ("--cpus-per-task=1", "--mem=300M", "--time=1", "--job-name=out-done")),
}


def check_queries(slurm: Slurm, ids: dict[str, str]) -> None:
    """Every query's records about the three jobs `ids` (name -> job id), asserted."""
    held, running, done = ids["held"], ids["running"], ids["done"]
    queue = {j.job_id: j for j in slurm.queue()}
    h, r = queue[held], queue[running]
    assert (h.state, h.reason, h.cpus_per_task, h.tasks, h.mem_mb, h.gpus, h.nodes) == \
        ("PENDING", "JobHeldUser", 2, 1, 1000, 1, 1), h
    assert gpu_types(h.gres) == {"local1g"} and gpu_count(slurm.gres(held)) == 1, h.gres
    assert (r.state, r.cpus_per_task, r.mem_mb, r.gpus, r.gres) == ("RUNNING", 1, 500, 0, ""), r
    assert done not in queue
    assert slurm.memory_per_cpu(running) and not slurm.memory_per_cpu(held)
    assert USER_COMMENT in slurm.comment(held)
    assert slurm.qos_of(held) == h.qos != ""
    timed = {j.job_id: j for j in slurm.timed_jobs()}
    assert (timed[held].limit_min, timed[held].cpus, timed[held].state, timed[held].started) \
        == (10, 2, "PENDING", "")
    assert (timed[running].limit_min, timed[running].cpus, timed[running].restarts) == (5, 1, 0)
    assert timed[running].started and done not in timed
    again = slurm.timed_job(running)
    assert again is not None and (again.uid, again.state, again.limit_min, again.started) == \
        (timed[running].uid, "RUNNING", 5, timed[running].started)
    assert slurm.timed_job(done).state == "COMPLETED"
    texts = {j.job_id: j for j in slurm.queued_texts()}
    assert USER_COMMENT in texts[held].comment and done not in texts
    assert (texts[held].state, texts[held].limit_min, texts[held].cpus, texts[held].array) \
        == ("PENDING", 10, 2, False)
    assert texts[held].uid == timed[held].uid == texts[running].uid
    assert (texts[running].state, texts[running].limit_min) == ("RUNNING", 5)
    states = slurm.active_states([held, running, done])
    assert (states[held], states[running]) == ("PENDING", "RUNNING"), states
    own = {row["JobID"]: row for row in slurm.own_jobs()}
    assert own[held]["JobName"] == "out-held" and USER_COMMENT in own[held]["Comment"]

    nodes = {n.name: n for n in slurm.nodes()}
    assert nodes["node1"].cpus == 2 and gpu_types(nodes["node1"].gres) >= {"local1g"}
    use = {n.name: n for n in slurm.node_use()}
    assert use["node1"].cpus == 2 and use["node1"].cpus_alloc >= 1 and use["node1"].gpus == 4

    acct = {row["JobID"]: row for row in slurm.sacct([held, running, done])}
    assert acct[done]["State"] == "COMPLETED" and acct[done]["AllocCPUS"] == "1", acct[done]
    assert acct[done]["JobName"] == "out-done" and acct[held]["JobName"] == "out-held"
    assert acct[done]["ExitCode"] == "0:0" and "mem=300M" in acct[done]["AllocTRES"]
    assert acct[held]["State"] == "PENDING" and acct[held]["ReqMem"] == "1000M"
    assert acct[running]["State"] == "RUNNING"
    steps = {row["JobID"]: row for row in slurm.sacct([done], allocations_only=False)}
    assert {done, f"{done}.batch"} <= set(steps), steps
    assert steps[f"{done}.batch"]["JobName"] == "batch", steps
    ended = {e.job_id: e for e in slurm.ended("now-1day", [texts[held].uid], per_user=3)}
    assert (ended[int(done)].state, ended[int(done)].cpus) == ("COMPLETED", 1)
    assert int(running) not in ended and int(held) not in ended
    assert slurm.cluster_name() in slurm.clusters()
    assert ("root", "root") in slurm.associations()
    assert "normal" in {row[0] for row in slurm.qos_rows(["name", "maxtresperjob"])}


def recorder(slurm: Slurm) -> tuple[Slurm, Callable[[Path, dict[str, str]], None]]:
    """`slurm` made to note what every command prints (whole or line by line), and a
    function writing the notes with the jobs' ids to a file."""
    calls: dict[str, str] = {}
    run_once, lines_once = slurm._run_once, slurm._lines_once

    def noted(args, timeout):
        calls[" ".join(args)] = out = run_once(args, timeout)
        return out

    def noted_lines(args, timeout):
        lines = list(lines_once(args, timeout))
        calls[" ".join(args)] = "".join(line + "\n" for line in lines)
        return iter(lines)

    slurm._run_once = noted             # type: ignore[method-assign]
    slurm._lines_once = noted_lines     # type: ignore[method-assign]

    def write(path: Path, ids: dict[str, str]) -> None:
        path.write_text(json.dumps({"version": slurm.version(), "ids": ids, "calls": calls},
                                   indent=1, sort_keys=True) + "\n")
    return slurm, write


def replayed(path: Path) -> tuple[Slurm, dict[str, str]]:
    """A gateway that answers every command with what the recording at `path` says the
    release printed (KeyError naming a command it did not record), and the jobs' ids."""
    rec = json.loads(path.read_text())
    slurm = Slurm(conf=path)

    def answer(args, timeout):
        return rec["calls"][" ".join(args)]

    slurm._run_once = answer                                        # type: ignore
    slurm._lines_once = lambda args, timeout: iter(answer(args, timeout).splitlines())  # type: ignore
    return slurm, rec["ids"]
