"""The rendered sbatch scripts, whole, against golden files (tests/golden/render/): the
template has the most control flow of any file here, so any change to what a job runs
shows as a diff to review. SYNERGY_UPDATE_GOLDEN=1 writes the files anew."""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

import pytest

from slurm_synergy.submission.csvjobs import load_jobs
from slurm_synergy.model.policy import load_policy
from slurm_synergy.model.rightsize import Rightsized
from slurm_synergy.submission.render import render, task_for

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "render"
POLICY = Path(__file__).resolve().parents[2] / "etc" / "policy.toml"
FOLDER = "/home/user/project"       # the test's folder, as the golden files write it
# A user's script that declares -j/--workers and --epochs (its content is its key).
WITH_OPTIONS = ("import argparse\np = argparse.ArgumentParser()\n"
                "p.add_argument('-j', '--workers', type=int); p.add_argument('--epochs')\n"
                "p.parse_args()\n")
PLAIN = "print('no options')\n"
CASES = {
    # The default flow: measured while it trains where it is marked.
    "builtin": ("name,arch,depth,batch,workers,cpus,mem,time,iterations\n"
                "r8,resnet,8,32,1,2,3G,00:20:00,60\n", {}),
    # A user's script with a worker option, watched, in a partition.
    "script": ("name,script,workers,epochs,watch,partition,args\n"
               "s1,opts.py,2,3,yes,gpu,\"--lr 0.1\"\n", {}),
    # No worker option, workers given, profiled apart first and submitted again.
    "resubmit": ("name,script,workers,on_profiled\np1,plain.py,2,resubmit\n", {}),
    # Two DDP ranks under torchrun.
    "torchrun": ("name,script,launcher,nproc,cpus\nt1,plain.py,torchrun,2,4\n", {}),
    # Rows alike, as one array.
    "array": ("name,arch,batch,iterations\na1,alexnet,16,10\na2,alexnet,16,20\n",
              {"array": "0-1"}),
    # Decided by `synergy submit` in user mode.
    "decided": ("name,arch,batch,gpus\nd1,mobilenet,64,1\n",
                {"decision": Rightsized(cpus=1, mem_mb=1280, gpus=1, gpu_type="", workers=1,
                                        power_limit_w=250, asked="c2,m3072,g1",
                                        decided="c1,m1280,g1,w1,p250")}),
}


@pytest.fixture
def fixed(tmp_path, monkeypatch) -> Path:
    """Every path the scripts name that is not the case's own: fixed."""
    monkeypatch.setenv("SYNERGY_PYTHON", "/opt/synergy/bin/python")
    monkeypatch.setenv("SYNERGY_HOME", "/home/user/.slurm-synergy")
    monkeypatch.setenv("SYNERGY_DATA", "/data/synergy")
    (tmp_path / "opts.py").write_text(WITH_OPTIONS)
    (tmp_path / "plain.py").write_text(PLAIN)
    return tmp_path


def rendered(folder: Path, case: str) -> str:
    """The case's script, its folder written as FOLDER."""
    text, options = CASES[case]
    csv = folder / f"{case}.csv"
    csv.write_text(text)
    specs = load_jobs(csv)
    out = folder / "out"
    script = out / "scripts" / f"{case}.sbatch"
    tasks = [task_for(spec, i, out) for i, spec in enumerate(specs)]
    text = render(specs[0].name, tasks, out, script, load_policy(POLICY), **options)
    # Every one is bash that parses.
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    return text.replace(str(folder), FOLDER)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rendered_script_is_the_golden_one(fixed, case):
    text = rendered(fixed, case)
    path = GOLDEN / f"{case}.sbatch"
    if os.environ.get("SYNERGY_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path}: no golden file; SYNERGY_UPDATE_GOLDEN=1 writes it"
    golden = path.read_text()
    assert text == golden, "".join(difflib.unified_diff(
        golden.splitlines(True), text.splitlines(True), str(path), "rendered now"))
