"""The plugin on the real local cluster, where the site resubmits profiled jobs
(on_profiled = resubmit): an unprofiled workload is profiled, resubmits itself and is
rewritten by the job_submit shim inside slurmctld; a second submission is rewritten at
once; user mode does the same without the shim; and a missing, corrupt or hostile
decision table lets every job through unchanged, with slurmctld's log saying why. The
default flow, measured in the run, is test_inrun.py's.
"""

import os
import re
import time
from pathlib import Path

import pytest

from slurm_synergy.submission.csvjobs import load_jobs
from slurm_synergy.model.policy import load_policy
from slurm_synergy.paths import policy_path
from slurm_synergy.decisions.table import TABLE_NAME, entries_of, read
from slurm_synergy.slurm import Slurm, tres
from slurm_synergy.slurm_release import chosen

from slurm_synergy.chains import read_chains

from .conftest import finish, resubmitted, submitted_ids, synergy

# A CPU-hungry workload (large JPEGs decoded and cropped) and a CPU-light one (a small
# Transformer on text): the workloads of `make demo`, one short job each.
RIGHTSIZE = ("name,arch,depth,batch,workers,gpus,cpus,mem,time,iterations,args\n"
             "rs-resnet8-jpeg512,resnet,8,32,1,1,2,3G,00:20:00,20,--image-size 512 --crop 32 "
             "--dataset-size 256\n"
             "rs-transformer,transformer,,32,1,1,2,3G,00:20:00,20,--dataset-size 2048\n")
ACCT = ("JobID", "JobName", "State", "AllocCPUS", "ReqCPUS", "ReqMem", "ReqTRES", "AllocTRES",
        "Comment")


def mem_mb(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([MG])", text)
    assert m, text
    return int(float(m.group(1)) * (1024 if m.group(2) == "G" else 1))


def table_entries(box):
    return entries_of(read(box.etc / TABLE_NAME)[1])


@pytest.fixture(scope="module")
def csv_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rightsize-list") / "rightsize.csv"
    path.write_text(RIGHTSIZE)
    return path


@pytest.fixture(scope="module")
def rightsized(slurm, box, tmp_path_factory, csv_path):
    """Both workloads submitted with nothing known about them, followed to the end of
    their resubmitted jobs."""
    out = tmp_path_factory.mktemp("rightsize")
    first = submitted_ids(synergy("submit", str(csv_path), "--out", str(out),
                                  "--on-profiled", "resubmit"))
    finish(slurm, first.values(), timeout=1200)
    second = {name: resubmitted(job) for name, job in first.items()}
    finish(slurm, second.values(), timeout=1200)
    acct = {r["JobID"]: r for r in slurm.sacct([*first.values(), *second.values()], ACCT)}
    specs = {s.name: s for s in load_jobs(csv_path)}
    return specs, {n: acct[j] for n, j in first.items()}, {n: acct[j] for n, j in second.items()}


def test_unprofiled_jobs_are_profiled_then_resubmitted_with_the_decision(box, rightsized):
    specs, first, second = rightsized
    entries = table_entries(box)
    for name, spec in specs.items():
        assert first[name]["State"] == "COMPLETED" and second[name]["State"] == "COMPLETED"
        assert first[name]["Comment"].endswith(" profile=1"), "the shim marked it"
        d = entries[spec.fingerprint]
        row = second[name]
        # sacct: the resubmitted job ran with the decision's cores, memory and GPUs.
        assert int(row["AllocCPUS"]) == d.cpus
        assert mem_mb(tres(row["AllocTRES"], "mem")) == d.mem_mb
        assert int(tres(row["AllocTRES"], "gres/gpu") or 0) == d.gpus
        assert f"from={first[name]['JobID']}" in row["Comment"]
        assert f"decision=c{d.cpus},m{d.mem_mb},g{d.gpus},w{d.workers}" in row["Comment"]


def test_hungry_and_light_workloads_get_different_allocations_and_explain_why(rightsized):
    specs, _, second = rightsized
    hungry, light = second["rs-resnet8-jpeg512"], second["rs-transformer"]
    assert (hungry["AllocCPUS"], hungry["AllocTRES"]) != (light["AllocCPUS"],
                                                          light["AllocTRES"])
    for name, spec in specs.items():
        proc = synergy("plugin", "explain", spec.fingerprint)
        assert proc.returncode == 0, proc.stderr
        text = proc.stdout
        assert f"workload {spec.fingerprint} ({name})" in text
        assert "tolerance" in text and "GPU-proportional share" in text
        assert "the shim applies this decision" in text
        # What measuring cost: the profiled job was submitted again, a second wait.
        assert re.search(r"cost: profiled in \d+ s of job \d+'s allocation, then submitted "
                         r"again as job \d+ \(on_profiled = resubmit\): a second queue wait",
                         text), text
        # The decision follows the measurements, under the site policy: 1 core if it is
        # within the tolerance by the medians, or if the runs' spreads (each counted as
        # at least min_spread) cannot tell and its median is within max_noise_loss.
        policy = load_policy(policy_path())
        cores = re.search(r"unless marked: 1c ([\d.]+) ±(\d+)%, 2c ([\d.]+) ±(\d+)%", text)
        one, s1, two, s2 = (float(g) for g in cores.groups())
        s1, s2 = (max(s / 100, policy.min_spread) for s in (s1, s2))
        if two * (1 - policy.tolerance) <= one:
            expected = 1                                # within the tolerance outright
        else:
            # Rounded spreads and rates: only a verdict clear of the rounding is checked.
            untold = one * (1 + s1) - (1 - policy.tolerance) * two * (1 - s2)
            near = one - (1 - policy.max_noise_loss) * two
            clear = 0.01 * two
            expected = (2 if untold < -clear or near < -clear else
                        1 if untold > clear and near > clear else None)
            assert ("the fewer cores are kept" in text) == \
                (int(second[name]["AllocCPUS"]) == 1), text
        if expected is not None:
            assert int(second[name]["AllocCPUS"]) == expected, text


def test_a_second_submission_is_rewritten_at_once_without_profiling(slurm, box, rightsized,
                                                                    tmp_path, csv_path):
    specs, _, _ = rightsized
    ids = submitted_ids(synergy("submit", str(csv_path), "--out", str(tmp_path), "--hold",
                                "--force"))
    try:
        # Held, so not run: slurmctld's view of the request (accounting gets the comment
        # only once a job starts).
        queued = slurm.run(["squeue", "--noheader", "--format=%j|%C|%m|%b|%k",
                            "--jobs=" + ",".join(ids.values())])
        rows = {line.split("|")[0]: line.split("|") for line in queued.splitlines()}
        entries = table_entries(box)
        for name, spec in specs.items():
            d = entries[spec.fingerprint]
            _, cpus, mem, gres, comment = rows[name]
            # gres:gpu:1 until 22.05, gres/gpu:1 from 23.02
            assert (int(cpus), mem_mb(mem), gres.replace("gres/", "gres:")) == \
                (d.cpus, d.mem_mb, f"gres:gpu:{d.gpus}")
            assert "profile=1" not in comment
            assert f"decision=c{d.cpus},m{d.mem_mb}" in comment
    finally:
        slurm.cancel(list(ids.values()))


def test_user_mode_applies_the_same_decision_in_the_script(slurm, box, rightsized, tmp_path,
                                                           csv_path):
    specs, _, _ = rightsized
    ids = submitted_ids(synergy("submit", str(csv_path), "--out", str(tmp_path), "--hold", "--force",
                                "--mode", "user"))
    try:
        entries = table_entries(box)
        for name, spec in specs.items():
            d = entries[spec.fingerprint]
            script = (tmp_path / "scripts" / f"{name}.sbatch").read_text()
            assert f"#SBATCH --cpus-per-task={d.cpus}\n" in script
            assert f"#SBATCH --mem={d.mem_mb}M\n" in script
            assert f'export SYNERGY_WORKERS="${{SYNERGY_WORKERS:-{d.workers}}}"' in script
    finally:
        slurm.cancel(list(ids.values()))


def test_install_on_the_local_cluster_is_already_done(box):
    shown = synergy("plugin", "install")
    assert shown.returncode == 0 and "ok   slurm.conf: JobSubmitPlugins includes lua" in \
        shown.stdout.replace("#    ", "")
    applied = synergy("plugin", "install", "--apply")
    assert applied.returncode == 0, applied.stderr
    assert "ok   slurm.conf: JobSubmitPlugins includes lua" in applied.stdout
    assert "is current" in applied.stdout and "decision table" in applied.stdout
    # The release it installs into, read from that cluster's own scontrol.
    assert f"Slurm {box.release.version}." in applied.stdout
    assert "a release slurm-synergy is tested on" in applied.stdout


# --- faults: a made-up workload with a known decision, then the table broken ------------

FP = "00000000000000aa"
ME = os.getuid()        # the tests submit as this user
HEAD = ("synergy-decisions 5 gen={gen} user_wins=0 profile_new=1 max_cpus=2 "
        "max_mem_mb=20000 max_gpus=4 entries=1\n")
END = "end gen={gen} entries=1\n"


def table(gen: str, line: str, end: bool = True) -> str:
    """A table of one line, closed by its last line where `end`."""
    return HEAD.format(gen=gen) + line + (END.format(gen=gen) if end else "")


GOOD = table("a1", f"{ME} {FP} 1 700 0 - 1 0 1 0\n")
FAULTS = {
    "missing": (None, "cannot open the decision table"),
    "corrupt": ("}{ not a table\n", "is not a version 5 decision table"),
    "negative cores": (table("b2", f"{ME} {FP} -1 700 0 - 1 0 1 0\n"), "malformed line"),
    "10^12 MB": (table("c3", f"{ME} {FP} 1 1000000000000 0 - 1 0 1 0\n"), "malformed line"),
    "gres injection": (table("d4", f'{ME} {FP} 1 700 1 a";os.exit(1) 1 0 1 0\n'),
                       "malformed line"),
    "cut short": (table("e5", f"{ME} {FP} 1 700 0 - 1 0 1 0\n", end=False), "is not whole"),
    "huge": (table("f6", "") + "#" * (17 << 20), "over the limit"),
    # Opened without O_NONBLOCK, a FIFO would hold every submission (plain ones too).
    "fifo": (os.mkfifo, "is not a regular file"),
    "directory": (Path.mkdir, "is not a regular file"),
}


def submit_probe(slurm, tmp_path) -> dict:
    """A held job of the made-up workload asking 2 cores and 1500 MB; its request as
    slurmctld recorded it."""
    job = slurm.run(["sbatch", "--parsable", "--hold", "--cpus-per-task=2", "--mem=1500M",
                     f"--comment=synergy:fp={FP}", f"--output={tmp_path}/probe-%j.out",
                     "--wrap", "true"]).strip()
    try:
        text = slurm.run(["scontrol", "show", "job", job])
    finally:
        slurm.cancel([job])
    return {"cpus": re.search(r"NumCPUs=(\d+)", text).group(1),
            "mem": re.search(r"MinMemoryNode=(\S+)", text).group(1)}


@pytest.fixture
def broken_table(box):
    path = box.etc / TABLE_NAME
    yield path
    if path.is_dir():
        path.rmdir()
    assert synergy("plugin", "sync").returncode == 0


@pytest.mark.parametrize("kind", list(FAULTS))
def test_a_missing_corrupt_or_hostile_table_never_stops_a_job(slurm, box, broken_table,
                                                              tmp_path, kind):
    broken_table.write_text(GOOD)
    assert submit_probe(slurm, tmp_path) == {"cpus": "1", "mem": "700M"}, \
        "with a good table the shim rewrites the probe"
    text, why = FAULTS[kind]
    if text is None:
        broken_table.unlink()
    elif callable(text):
        broken_table.unlink()
        text(broken_table)
    else:
        broken_table.write_text(text)
    log = box.state / "log" / "slurmctld.log"
    offset = log.stat().st_size
    plain = slurm.run(["sbatch", "--parsable", "--hold", f"--output={tmp_path}/plain-%j.out",
                       "--wrap", "true"]).strip()
    slurm.cancel([plain])
    assert plain.isdigit(), "a plain job goes through whatever is at the table's path"
    assert submit_probe(slurm, tmp_path) == {"cpus": "2", "mem": "1500M"}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        new = log.read_bytes()[offset:].decode(errors="replace")
        if why in new:
            break
        time.sleep(0.2)
    assert why in new and "pass through unchanged" in new, new[-2000:]


def test_user_mode_profiles_and_resubmits_without_the_shim(slurm, box, tmp_path):
    """--mode user: this command and the job decide, not slurmctld (whose shim has no
    decision for this workload and is told SYNERGY_PROFILE by the job itself)."""
    csv = tmp_path / "user.csv"
    csv.write_text("name,arch,batch,workers,gpus,cpus,mem,time,iterations\n"
                   "um-lstm,lstm,16,1,1,2,3G,00:10:00,6\n")
    ids = submitted_ids(synergy("submit", str(csv), "--out", str(tmp_path), "--mode", "user",
                                "--on-profiled", "resubmit"))
    first = ids["um-lstm"]
    finish(slurm, [first], timeout=900)
    again = resubmitted(first)
    rec = finish(slurm, [again], timeout=900)[again]
    assert rec.state == "COMPLETED"
    link = next(c for c in read_chains(Slurm().cluster_name()) if c.resubmitted_job == again)
    assert link.mode == "user" and link.decision
    cpus, mem = re.match(r"c(\d+),m(\d+),", link.decision).groups()
    assert rec.cpus == int(cpus) and mem_mb(rec.mem) == int(mem)
    assert f"decision={link.decision}" in rec.comment and f"from={first}" in rec.comment
    # The one applier writes what was asked beside the decision, as the shim does.
    assert "asked=c2,m3072,g1" in rec.comment


# --- each way to ask, under a decision of 1 core, 700 MB and 1 GPU ----------------------

SIZED = {"NumCPUs": "1", "MinMemoryNode": "700M"}
AS_ASKED = {"NumCPUs": "2", "MinMemoryNode": "1500M"}
# The decision is per node: the per-node and per-CPU forms are sized (memory per CPU
# becomes memory per node), and where Slurm keeps a request per GPU or per job the shim
# leaves the job as asked (etc/job_submit.lua's leave_alone).
FORMS = {
    "--gres": (("--cpus-per-task=2", "--mem=1500M", "--gres=gpu:1"), SIZED),
    "--gpus-per-node": (("--cpus-per-task=2", "--mem=1500M", "--gpus-per-node=1"), SIZED),
    "--mem-per-cpu": (("--cpus-per-task=2", "--mem-per-cpu=750M", "--gres=gpu:1"), SIZED),
    "--gpus": (("--cpus-per-task=2", "--mem=1500M", "--gpus=1"), AS_ASKED),
    "--cpus-per-gpu": (("--cpus-per-gpu=2", "--mem=1500M", "--gres=gpu:1"),
                       {"CpusPerTres": "gres:gpu:2", "MinMemoryNode": "1500M"}),
    "--mem-per-gpu": (("--cpus-per-task=2", "--mem-per-gpu=1500M", "--gres=gpu:1"),
                      {"NumCPUs": "2", "MemPerTres": "gres:gpu:1500"}),
}
# From 26.05 Slurm itself may lower a running job's memory (--mem-update=MARGIN@DELAY): a
# neighbour the shim sizes beside and keeps.
if chosen().version >= "26.05":
    FORMS["--mem-update"] = (("--cpus-per-task=2", "--mem=1500M", "--gres=gpu:1",
                              "--mem-update=10@5"), {**SIZED, "MemUpdate": "10%@5min"})


@pytest.mark.parametrize("form", list(FORMS))
def test_each_way_to_ask_is_sized_or_left_whole_on_this_release(slurm, broken_table,
                                                                 tmp_path, form):
    broken_table.write_text(table("a7", f"{ME} {FP} 1 700 1 - 1 0 1 0\n"))
    options, want = FORMS[form]
    job = slurm.run(["sbatch", "--parsable", "--hold", *options, f"--comment=synergy:fp={FP}",
                     f"--output={tmp_path}/form-%j.out", "--wrap", "true"]).strip()
    try:
        text = slurm.run(["scontrol", "show", "job", "-o", job])
    finally:
        slurm.cancel([job])
    # Slurm 23.02 on spells a GRES gres/gpu where 22.05 wrote gres:gpu.
    held = dict(f.replace("gres/", "gres:").split("=", 1) for f in text.split() if "=" in f)
    assert {k: held.get(k) for k in want} == want, text
    assert (" decision=c1,m700,g1," in text) == (want.get("MinMemoryNode") == "700M"), text
    # One GPU whichever field holds it; the cores in tres_per_task (23.11 on) never stale.
    gpus = [v for k, v in held.items() if k in ("TresPerNode", "TresPerJob")]
    assert gpus == ["gres:gpu:1"], text
    assert held.get("TresPerTask", f"cpu={held['NumCPUs']}") == f"cpu={held['NumCPUs']}", text
