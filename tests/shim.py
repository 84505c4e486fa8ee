"""The job_submit shim (etc/job_submit.lua) run by Lua 5.1 outside slurmctld
(tests/unit/lua/harness.lua): the jobs it is fed, the tables it reads, and a decision to
put in them. The shim's tests and the tests that hold Python and Lua to one rule share it."""

import shutil
import subprocess
from pathlib import Path
from typing import Callable

from slurm_synergy.decisions.table import TABLE_NAME, Owned, render
from slurm_synergy.model.engine import Decision, NodeShape
from slurm_synergy.model.plainkey import PlainJob, plain_key
from slurm_synergy.model.policy import Policy
from slurm_synergy.plugin import contract
from slurm_synergy.plugin.install import SHIM


def decision(fp="0123456789abcdef", cpus=2, mem_mb=1024, gpus=1, gpu_type="", workers=1,
             power_limit_w=0) -> Decision:
    """A decision of the given size for workload `fp`."""
    return Decision(fp, "job", cpus, mem_mb, gpus, gpu_type, workers, power_limit_w, 100.0,
                    100.0, 4, 16000, ("because",))


ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "tests" / "unit" / "lua" / "harness.lua"
LUA = shutil.which("lua5.1")
FP = "0123456789abcdef"
UID = 1000          # the harness submits every job as uid 1000
OURS = {"name": "j", "comment": f"synergy:fp={FP} req=cpus,mem", "cpus_per_task": "2",
        "min_cpus": "2", "pn_min_cpus": "2", "pn_min_memory": "3072",
        "tres_per_node": "gres:gpu:2"}


def escaped(value: str) -> str:
    """A value as the harness reads it back: on one line."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def run(tmp_path: Path, jobs: list[dict], table: str | Callable[[Path], None] | None,
        partitions: str = "gpu:16:1:1") -> tuple[list[dict], list[str]]:
    """Submit `jobs` through the shim with `table` at its path (text, or a function that
    makes something there); the harness is killed, and the test fails, if it hangs."""
    assert LUA, "lua5.1 is missing: make setup installs it"
    (tmp_path / "job_submit.lua").write_text(contract.rendered(SHIM.read_text()))
    if callable(table):
        table(tmp_path / TABLE_NAME)
    elif table is not None:
        (tmp_path / TABLE_NAME).write_text(table)
    spec = tmp_path / "jobs.txt"
    spec.write_text("\n\n".join("\n".join(f"{k}={escaped(v)}" for k, v in job.items())
                                for job in jobs), encoding="utf-8", errors="surrogateescape")
    proc = subprocess.run([LUA, str(HARNESS), str(tmp_path / "job_submit.lua"), str(spec),
                           partitions],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out, logs = [], []
    for line in proc.stdout.splitlines():
        if line.startswith("JOB "):
            out.append({"rc": line.split("rc=")[1]})
        elif line.startswith("LOG "):
            logs.append(line[4:])
        else:
            key, _, value = line.partition("=")
            out[-1][key] = value
    return out, logs


DEFAULT_SHAPE = NodeShape(16, 64000, 4)


def table(*decisions, policy: Policy | None = None, shape: NodeShape = DEFAULT_SHAPE,
          partition: str = "") -> str:
    """A decision table of `decisions`, each uid 1000's (the harness's submitter)."""
    return render([Owned(UID, d) for d in decisions], policy or Policy(), shape, partition)


def unchanged(job: dict) -> bool:
    """The shim let OURS through as it came."""
    return all(job[k] == v for k, v in OURS.items()) and not any(
        k.startswith("env.") for k in job)


# A plain batch job as slurmctld hands it to job_submit: its script comes from a file.
BATCH = {"name": "train", "cpus_per_task": "4", "min_cpus": "4", "pn_min_cpus": "4",
         "pn_min_memory": "8192", "tres_per_node": "gres:gpu:1", "work_dir": "/home/u/exp",
         "num_tasks": "4294967294", "env.PATH": "/usr/bin"}
NO_TASKS = "4294967294"         # num_tasks when --ntasks was not given (NO_VAL - 1)


def submit_script(tmp_path: Path, script: str | bytes, tbl: str | None,
                  **fields: str) -> tuple[dict, list[str]]:
    """BATCH with `script` (and `fields` over BATCH's) through the shim: the job, the logs."""
    path = tmp_path / f"script{len(list(tmp_path.glob('script*')))}.sh"
    path.write_bytes(script if isinstance(script, bytes) else script.encode())
    (job,), logs = run(tmp_path, [dict(BATCH, script_from=str(path), **fields)], tbl)
    return job, logs


def key_of(job: dict) -> str:
    """The key the shim wrote into a plain job's comment."""
    assert job["comment"].startswith("synergy:fp="), job
    return job["comment"].split()[0].removeprefix("synergy:fp=")


def python_key(script: str | bytes, **fields: str) -> str | None:
    """model/plainkey's key of the job submit_script(script, **fields) submits."""
    fields = {**BATCH, **fields}
    text = script if isinstance(script, str) else script.decode("utf-8", "surrogateescape")
    argv = sorted((int(k.split(".")[1]), v) for k, v in fields.items()
                  if k.startswith("argv.") and k != "argv.0")
    tasks = fields["num_tasks"]
    return plain_key(PlainJob(UID, text, tuple(v for _, v in argv), fields["work_dir"],
                              fields.get("partition", ""), fields["tres_per_node"],
                              "" if tasks == NO_TASKS else tasks))
