"""Every environment variable the product sets or reads, with who sets it and who reads it.

An environment variable crosses processes that share no code: root's shim sets one in a
job's environment, the batch script or the TaskProlog passes it on, a probe inside the
user's Python reads it. This is the one list of them; `tests/unit/test_environment.py`
holds it to the sources: every SYNERGY_* name the package, the shim or a template spells
is here, and each entry names exactly the files that spell it.

Paths are relative to the repository; a setter outside it (the user, the site, Slurm) is
named in words.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    """One of the product's own variables."""

    name: str
    meaning: str
    set_by: tuple[str, ...]       # files that set it, or the party outside the code
    read_by: tuple[str, ...]      # files that read it (a file that only mentions it too)


USER, SITE = "the user", "the site's admin"

OWN: tuple[Variable, ...] = (
    # --- where things are -----------------------------------------------------------
    Variable("SYNERGY_STATE", "the local cluster's state folder", (USER,),
             ("slurm_synergy/paths.py",)),
    Variable("SYNERGY_HOME", "a user's own folder of the product (profiles, ledger, tune log)",
             (USER, "slurm_synergy/demo_user.py"), ("slurm_synergy/paths.py",)),
    Variable("SYNERGY_PROFILES", "the site's shared profile store; unset: each user's own",
             (SITE, "slurm_synergy/demo_user.py"),
             ("slurm_synergy/profiles.py", "slurm_synergy/cli/profiles.py",
              "slurm_synergy/measure/offline/plan.py", "profiler/offline_profiler.py")),
    Variable("SYNERGY_POLICY", "the site policy file; unset: etc/policy.toml", (SITE,
             "etc/node_hook.sh.j2"),
             ("slurm_synergy/paths.py", "slurm_synergy/model/policy.py",
              "slurm_synergy/hooks/context.py", "slurm_synergy/plugin/install.py",
              "slurm_synergy/site.py",
              "etc/policy.toml")),
    Variable("SYNERGY_DECISIONS", "the decision table; unset: beside slurm.conf", (SITE,),
             ("slurm_synergy/decisions/table.py",)),
    Variable("SYNERGY_PYTHON", "the interpreter generated jobs run (a shared venv)", (SITE,),
             ("slurm_synergy/submission/render.py",)),
    Variable("SYNERGY_DATA", "where generated datasets go", (USER,),
             ("slurm_synergy/submission/render.py",)),
    Variable("SYNERGY_TUNE_LOG", "`synergy tune`'s change log", (USER,),
             ("slurm_synergy/tune/apply.py", "slurm_synergy/cli/tune.py")),
    Variable("SYNERGY_GPU_STATS", "the folder of per-job GPU records on a node",
             (SITE, "etc/node_hook.sh.j2"),
             ("slurm_synergy/paths.py", "slurm_synergy/hooks/install.py",
              "slurm_synergy/cli/hooks.py")),
    Variable("SYNERGY_GPU_BACKEND", "`none` turns GPU handling off on a node", (SITE,),
             ("slurm_synergy/gpu/__init__.py",)),
    # --- root's node hooks -------------------------------------------------------
    Variable("SYNERGY_HOOK_LOG", "the node hooks' log", ("etc/node_hook.sh.j2",),
             ("slurm_synergy/hooks/context.py",)),
    Variable("SYNERGY_HOOK_RUN", "the node hooks' run folder (samplers' pid files)",
             ("etc/node_hook.sh.j2",), ("slurm_synergy/hooks/context.py",)),
    # --- one job's way: what the shim, the script and the TaskProlog hand down -------
    Variable("SYNERGY_FINGERPRINT", "the job's workload key",
             ("etc/job_submit.lua", "templates/sbatch.sh.j2"),
             ("etc/task_prolog.sh.j2", "slurm_synergy/probe/task.py")),
    Variable("SYNERGY_PLAIN", "a plain script's key again: the TaskProlog probes its tasks",
             ("etc/job_submit.lua", "templates/sbatch.sh.j2"),
             ("etc/task_prolog.sh.j2", "slurm_synergy/probe/task.py")),
    Variable("SYNERGY_PROFILE", "1: measure this job in its run; 0: never",
             ("etc/job_submit.lua", "templates/sbatch.sh.j2",
              "slurm_synergy/submission/render.py", "slurm_synergy/submission/resubmit.py",
              "slurm_synergy/submission/submit.py", USER),
             ("slurm_synergy/probe/task.py",)),
    Variable("SYNERGY_WORKERS", "the decision's data-loader workers: the TaskProlog "
             "exports what the prolog read in the job's comment (the shim clears an "
             "inherited one; user mode's script carries its own for clusters without "
             "the hooks)",
             ("slurm_synergy/hooks/taskenv.py", "etc/job_submit.lua",
              "templates/sbatch.sh.j2", "slurm_synergy/submission/resubmit.py"),
             ("slurm_synergy/probe/task.py",)),
    Variable("SYNERGY_POWER_LIMIT_W", "the decision's GPU power limit, W",
             ("etc/job_submit.lua", "slurm_synergy/submission/resubmit.py",
              "slurm_synergy/submission/render.py"), ()),
    Variable("SYNERGY_PROBE_DIR", "the folder a probed process writes its record to",
             ("slurm_synergy/probe/records.py",),
             ("etc/job_submit.lua", "etc/task_prolog.sh.j2")),
    Variable("SYNERGY_PROBE_CONFIG", "the probe's settings, JSON",
             ("slurm_synergy/probe/records.py",),
             ("etc/job_submit.lua", "etc/task_prolog.sh.j2")),
    Variable("SYNERGY_TASK_ANCHOR", "the pid a task's process tree is anchored at",
             ("slurm_synergy/probe/task.py",),
             ("etc/job_submit.lua", "etc/task_prolog.sh.j2")),
    Variable("SYNERGY_TASK_PYTHON", "the interpreter the TaskProlog's probe runs in",
             ("etc/task_prolog.sh.j2",),
             ("etc/job_submit.lua", "slurm_synergy/probe/task.py",
              "slurm_synergy/probe/boot/sitecustomize.py")),
    Variable("SYNERGY_OUTPUT", "the offline profiler's step outputs and logs",
             ("templates/sbatch.sh.j2", "slurm_synergy/measure/offline/steps.py"), ()),
    Variable("SYNERGY_FRESH_STEPS", "1: each offline profiling step starts a fresh Python",
             (USER,), ("profiler/offline_profiler.py",)),
    # --- a heterogeneous job's components (the script tells each task) ----------------
    Variable("SYNERGY_HET_COMPONENT", "the component's index", (
        "slurm_synergy/submission/render.py",), ()),
    Variable("SYNERGY_GPU_TYPE", "the component's GPU type", (
        "slurm_synergy/submission/render.py",), ()),
    Variable("SYNERGY_BATCH", "the component's share of the global batch", (
        "slurm_synergy/submission/render.py",), ()),
    Variable("SYNERGY_MICRO_BATCH", "the component's micro-batch", (
        "slurm_synergy/submission/render.py",), ()),
    Variable("SYNERGY_ACCUMULATION", "the component's gradient accumulation steps", (
        "slurm_synergy/submission/render.py",), ()),
    Variable("SYNERGY_GLOBAL_BATCH", "the whole job's batch", (
        "templates/sbatch-hetero.sh.j2",), ()),
)

# Set by Slurm or a launcher, read by the product (where: grep the name).
OUTSIDE: dict[str, str] = {
    "SLURM_CONF": "the slurm.conf every Slurm command and the shim's table path follow",
    "SLURM_VERSION": "the Slurm release the local cluster runs (the user: make demo "
                     "SLURM_VERSION=24.11); unset, the host's",
    "PATH": "where Slurm's commands are found: the local cluster on another release puts "
            "its own first",
    "SLURM_JOB_ID": "the job a process or a hook belongs to",
    "SLURM_JOB_UID": "the job's owner, in the prolog and epilog",
    "SLURM_JOB_GID": "the job's group, in the prolog and epilog",
    "SLURM_JOB_COMMENT": "the job's comment, in the prolog (the decision's power limit)",
    "SLURM_JOB_GPUS": "the GPUs a job holds on a node, in the prolog and epilog",
    "SLURM_JOB_PARTITION": "the job's partition, inside the job",
    "SLURM_JOB_NAME": "the job's name, inside the job",
    "SLURM_JOB_RESTART_COUNT": "how often the job was requeued, inside the job",
    "SLURM_CLUSTER_NAME": "the cluster a job runs on",
    "SLURM_GPUS_ON_NODE": "the GPUs an allocation has on this node",
    "SLURM_MEM_PER_NODE": "the allocation's memory per node, MB",
    "SLURM_MEM_PER_CPU": "the allocation's memory per CPU, MB",
    "SLURM_CPUS_PER_TASK": "the allocation's cores per task",
    "SLURM_CPUS_ON_NODE": "the allocation's cores on this node",
    "SLURM_JOB_CPUS_PER_NODE": "the job's cores on each of its nodes, inside any step",
    "SLURM_NODEID": "this node's place among the job's nodes",
    "SLURM_STEP_NUM_TASKS": "the tasks of the step a process is in",
    "SLURM_PROCID": "a task's rank in its step",
    "SLURMD_NODENAME": "the node a hook runs on",
    "CUDA_VISIBLE_DEVICES": "the GPUs a process may use",
    "RANK": "a process's rank under torchrun",
    "MASTER_PORT": "the rendezvous port of a distributed run",
    "PYTHONPATH": "where a task's Python finds the probe's boot folder",
    "TMPDIR": "a job's scratch folder",
}

# What a job submitted from inside one of ours inherits and is not its own: its key, its
# marks and the probe's state are the shim's to give, or none (it clears them).
INHERITED: tuple[str, ...] = (
    "SYNERGY_FINGERPRINT", "SYNERGY_PLAIN", "SYNERGY_PROFILE", "SYNERGY_WORKERS",
    "SYNERGY_POWER_LIMIT_W", "SYNERGY_PROBE_DIR", "SYNERGY_PROBE_CONFIG",
    "SYNERGY_TASK_ANCHOR", "SYNERGY_TASK_PYTHON")
