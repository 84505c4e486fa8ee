"""Job specs to sbatch scripts, through the jinja2 template in templates/.

Every value reaching the script was validated by csvjobs; values inside the shell
body are additionally shell-quoted (the `q` filter), and StrictUndefined turns a
missing value into an error rather than an empty string.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


from slurm_synergy import paths
from slurm_synergy.templating import environment
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.jobspec import SYNTHETIC_DATASET, JobSpec, torchrun_argv
from slurm_synergy.model.rightsize import Rightsized
from slurm_synergy.model.comment import decision_text, hetero_comment, with_marks
from slurm_synergy.model.options import declared_options, spellings, without
from slurm_synergy.model.policy import Policy
from slurm_synergy.measure import errors as exit_codes

INRUN_MODULE = "slurm_synergy.measure.inrun.supervisor"
# #SBATCH lines are parsed by sbatch, not the shell, so paths there cannot be quoted.
SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9_./+-]+$")


@dataclass(frozen=True)
class Task:
    index: int
    spec: JobSpec
    output: str
    argv: tuple[str, ...]


def python_for_jobs() -> str:
    """The interpreter jobs run: SYNERGY_PYTHON, else this one (a shared venv on a site)."""
    return os.environ.get("SYNERGY_PYTHON", sys.executable)


def data_dir() -> Path:
    """Where generated datasets go: SYNERGY_DATA, else data/ in the user's synergy home."""
    return Path(os.environ.get("SYNERGY_DATA", paths.home_dir() / "data"))


def check_out_dir(out: Path) -> Path:
    """`out` made absolute; SynergyError where #SBATCH lines could not carry it."""
    out = out.resolve()
    if not SAFE_PATH_RE.match(str(out)):
        raise SynergyError(f"output folder {out} has characters Slurm's #SBATCH lines cannot "
                           "carry (use letters, digits, _ . / + -)")
    return out


def task_for(spec: JobSpec, index: int, out: Path) -> Task:
    """The row as task `index` of its unit: its output folder and its training command (the built-in
    trainer's --data and --output added)."""
    output = out / (spec.output_folder or ".") / spec.name
    argv = spec.script_argv()
    if spec.builtin:
        if spec.dataset == SYNTHETIC_DATASET:
            argv += ["--data", str(data_dir() / spec.synthetic_data_name), "--generate-data"]
        else:
            argv += ["--data", spec.dataset]
        argv += ["--output", str(output)]
    argv += spec.args
    return Task(index, spec, str(output.resolve()), tuple(argv))


def render(name: str, tasks: Sequence[Task], out: Path, script_path: Path, policy: Policy,
           array: str = "", profile: bool = False, decision: Rightsized | None = None,
           profile_only: bool = False, mode: str = "auto", tag: str = "",
           offline: bool = False, on_profiled: str | None = None,
           sequential: bool = False) -> str:
    """The sbatch script for one job, or for one array job when `array` is set.

    `policy` is the site's (the first-batch limit, watching, on_profiled). `profile`
    turns measuring on by default; SYNERGY_PROFILE in the job's environment
    (0 or 1) decides in the end, so the plugin can mark jobs itself. A marked job is
    measured while it trains, unless `offline` (submit --profile) asks for the full
    profiler first or the job is to be resubmitted once profiled (`on_profiled`: the
    row's, else this, else the site policy's). `decision` (user mode) replaces the row's
    cores, memory and GPUs. `mode` is who decides for a resubmission (auto, shim, user).
    A `sequential` row waits on the one before it, so it is never resubmitted: that
    would escape the chain. `tag` marks the comment as this sbatch call's
    (`sub=<tag>`), for reconciling the ledger with Slurm.
    """
    head = tasks[0].spec
    on_profiled = head.on_profiled or on_profiled or policy.on_profiled
    resubmit = mode if on_profiled == "resubmit" and not (sequential or profile_only) else ""
    sources = sorted({t.spec.source.file for t in tasks})
    rows = ",".join(str(t.spec.source.row) for t in tasks)
    comment = head.comment
    cpus, mem_mb, gres = head.cpus, head.mem_mb, head.gres
    if decision is not None:
        cpus, mem_mb = decision.cpus, decision.mem_mb
        gres = decision.gres if head.gpus else gres
        # What the row asked, beside the decision (as the shim notes it), for reports.
        comment = with_marks(comment, asked=decision.asked, decision=decision.decided)
    elif profile:
        comment = with_marks(comment, profile="1")
    if tag:
        comment = with_marks(comment, sub=tag)
    return environment().get_template("sbatch.sh.j2").render(
        source=f"{', '.join(sources)} row(s) {rows}",
        script_path=script_path,
        name=name, cpus=cpus, mem_mb=mem_mb, time=head.time, gres=gres,
        partition=head.partition, array=array, logs=out / "logs", comment=comment,
        fingerprint=head.fingerprint, tasks=tasks, launcher=launcher(head),
        profiler=profiler_command(head, policy.first_batch_timeout_s), script=head.script,
        profile_default=int(profile),
        resubmit=resubmit and resubmit_command(head, script_path, comment, resubmit),
        decision=decision,
        profile_only=profile_only, clusters=paths.home_dir() / "clusters",
        watch=head.watch if head.watch is not None else policy.watch_runs,
        workers_option=head.workers_option,
        probe_workers="" if head.probe_workers is None else head.probe_workers,
        probe=[python_for_jobs(), "-m", "slurm_synergy.probe"],
        measurer=[python_for_jobs(), "-m", INRUN_MODULE],
        offline=offline or on_profiled == "resubmit", exit_codes=exit_codes,
        profile_workdir=paths.PROFILE_WORKDIR, move_file=paths.MOVE_FILE,
    )


# Each task of a heterogeneous job: its share where the job log shows it, the rank
# variables torch.distributed reads, then the script.
HETERO_TASK = ('echo "slurm-synergy: component $SYNERGY_HET_COMPONENT on $(hostname): rank '
               '$SLURM_PROCID of $SLURM_NTASKS, $SYNERGY_GPU_TYPE GPU(s) '
               '${CUDA_VISIBLE_DEVICES:-none}, batch $SYNERGY_BATCH = $SYNERGY_MICRO_BATCH x '
               '$SYNERGY_ACCUMULATION, power limit $SYNERGY_POWER_LIMIT_W W"; '
               'export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID; '
               'exec "$@"')


def render_hetero(name: str, task: Task, out: Path, script_path: Path, tag: str = "") -> str:
    """The sbatch script of a job over two GPU types: one component per type, each with
    its GPUs, its share and power limit in its tasks' environment and its comment (where
    the prolog finds the limit). Planned jobs are not profiled and carry no fingerprint,
    so the shim leaves them as they are."""
    spec = task.spec
    comments, envs, argvs = [], [], []
    batch_names = (["--batch"] if spec.builtin else
                   spellings("batch", declared_options(Path(spec.script))))
    for i, part in enumerate(spec.hetero):
        decided = decision_text(spec.cpus, spec.mem_mb, part.gpus, spec.workers,
                                part.power_limit_w, part.gpu_type)
        comment = hetero_comment(i, part.batch, part.micro_batch, part.accumulation, decided)
        comments.append(with_marks(comment, sub=tag) if tag else comment)
        envs.append(",".join(f"{k}={v}" for k, v in (
            ("SYNERGY_HET_COMPONENT", i), ("SYNERGY_GPU_TYPE", part.gpu_type),
            ("SYNERGY_BATCH", part.batch), ("SYNERGY_MICRO_BATCH", part.micro_batch),
            ("SYNERGY_ACCUMULATION", part.accumulation),
            ("SYNERGY_POWER_LIMIT_W", part.power_limit_w))))
        # The script trains on the part's micro-batch; the built-in trainer writes each
        # part's stats to a folder of its own.
        argv = without(task.argv, [*batch_names, *(["--output"] if spec.builtin else [])])
        argv += [batch_names[0], str(part.micro_batch)]
        if spec.builtin:
            argv += ["--output", f"{task.output}/{part.gpu_type}"]
        argvs.append([*launcher(spec), *argv])
    return environment().get_template("sbatch-hetero.sh.j2").render(
        source=f"{spec.source.file} row {spec.source.row}", script_path=script_path,
        name=name, time=spec.time, partition=spec.partition, cpus=spec.cpus,
        mem_mb=spec.mem_mb, logs=out / "logs", parts=spec.hetero, comments=comments,
        envs=envs, argvs=argvs, wrapper=["bash", "-c", HETERO_TASK, "synergy-hetero"],
        output=task.output, clusters=paths.home_dir() / "clusters", global_batch=spec.batch)


def profiler_command(spec: JobSpec, first_batch: float) -> list[str]:
    """The profiling prolog's command and options; the template adds the working folder,
    then the script and the task's own arguments. `first_batch`: the policy's limit."""
    # A step may take all of its first-batch allowance and then still measure.
    argv = [python_for_jobs(), "-m", paths.PROFILER_MODULE, "--fingerprint", spec.fingerprint,
            "--job-name", spec.name, "--first-batch-timeout", f"{first_batch:g}",
            "--step-timeout", f"{max(600.0, first_batch + 300):g}"]
    if spec.launch == "torchrun":
        argv += ["--torchrun", str(spec.procs)]
    if spec.workers_given:
        # The steps measure the job that runs, as a profile made in the run does.
        argv += ["--workers", str(spec.workers)]
    return argv


def resubmit_command(spec: JobSpec, script_path: Path, comment: str,
                     mode: str = "auto") -> list[str]:
    """What a profiled job runs to submit itself again (the template adds the job id)."""
    return [python_for_jobs(), "-m", "slurm_synergy.cli", "plugin", "resubmit",
            "--script", str(script_path), "--comment", comment, "--job-name", spec.name,
            "--mode", mode]


def launcher(spec: JobSpec) -> list[str]:
    """How the job starts its script: Python files with the jobs' Python, others as programs."""
    if spec.builtin:
        return [python_for_jobs(), "-m", paths.TRAIN_MODULE]
    if spec.launch == "torchrun":
        return torchrun_argv(python_for_jobs(), spec.procs, spec.script)
    if spec.script.endswith(".py"):
        return [python_for_jobs(), spec.script]
    return [spec.script]
