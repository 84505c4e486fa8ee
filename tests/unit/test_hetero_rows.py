"""A job list's row over two GPU types: read, planned and rendered as a Slurm
heterogeneous job; every bad cell named, nothing submitted."""

import subprocess
from pathlib import Path

import pytest

from slurm_synergy.submission.csvjobs import load_jobs
from slurm_synergy.model.comment import decision, marks
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.submission.render import render_hetero, task_for

ZEUS2 = Path(__file__).resolve().parents[2] / "data" / "zeus2"
CELL = f"local4g:1={ZEUS2 / 'cifar_a10.json'} local1g:1={ZEUS2 / 'cifar_t4.json'}"
HEAD = "name,arch,depth,batch,workers,cpus,mem,time,iterations,partition,hetero\n"


def specs(tmp_path, rows, head=HEAD):
    csv = tmp_path / "jobs.csv"
    csv.write_text(head + rows)
    return load_jobs(csv)


def test_a_row_over_two_types_is_planned_when_the_list_is_read(tmp_path):
    spec, = specs(tmp_path, f"het,resnet,8,1024,1,1,2G,00:10:00,20,multi,{CELL}\n")
    a10, t4 = spec.hetero
    assert (a10.gpu_type, t4.gpu_type) == ("local4g", "local1g")
    assert a10.batch + t4.batch == 1024 and a10.batch > t4.batch     # the faster card more
    assert (a10.power_limit_w, t4.power_limit_w) == (150, 70)
    assert spec.gpus == 2 and spec.gpu_type == ""
    plain, = specs(tmp_path, "plain,resnet,8,1024,1,1,2G,00:10:00,20,multi,\n")
    assert plain.hetero == () and plain.fingerprint != spec.fingerprint


def test_it_renders_one_component_per_type_with_its_share_and_limit(tmp_path):
    spec, = specs(tmp_path, f"het,resnet,8,1024,1,1,2G,00:10:00,20,multi,{CELL}\n")
    out = tmp_path / "out"
    script = out / "scripts" / "het.sbatch"
    script.parent.mkdir(parents=True)
    script.write_text(render_hetero("het", task_for(spec, 0, out), out, script, "0123456789ab"))
    text = script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    head, body = text.split("set -euo pipefail", 1)
    first, second = head.split("#SBATCH hetjob\n")
    for part, block in zip(spec.hetero, (first, second)):
        assert f"#SBATCH --gres=gpu:{part.gpu_type}:1" in block
        comment = block.split('#SBATCH --comment="')[1].split('"')[0]
        assert decision(comment).power_w == part.power_limit_w
        assert decision(comment).gpu_type == part.gpu_type
        assert marks(comment)["sub"] == "0123456789ab" and "fp=" not in comment
        assert (f"SYNERGY_BATCH={part.batch},SYNERGY_MICRO_BATCH={part.micro_batch},"
                f"SYNERGY_ACCUMULATION={part.accumulation},"
                f"SYNERGY_POWER_LIMIT_W={part.power_limit_w}") in body
        # The trainer gets the part's micro-batch, not the global batch.
        assert f"--batch {part.micro_batch} --output" in body
    assert "--batch 1024" not in body and body.count("--het-group=") == 2


@pytest.mark.parametrize("cell, column, message", [
    (f"local4g:1={ZEUS2 / 'cifar_a10.json'}", "hetero", "is not TYPE:GPUS=TRACE"),
    (f"local4g:1={ZEUS2 / 'cifar_a10.json'} local4g:1={ZEUS2 / 'cifar_t4.json'}", "hetero",
     "named twice"),
    (f"local4g:1={ZEUS2 / 'nope.json'} local1g:1={ZEUS2 / 'cifar_t4.json'}", "hetero",
     "is not a file"),
    (f"v100:1={ZEUS2 / 'cifar_a10.json'} local1g:1={ZEUS2 / 'cifar_t4.json'}", "hetero",
     "no v100 to take its idle power from"),
    (f"local4g:0={ZEUS2 / 'cifar_a10.json'} local1g:1={ZEUS2 / 'cifar_t4.json'}", "hetero",
     "at least 1 GPU"),
])
def test_a_bad_cell_is_named_and_nothing_is_submitted(tmp_path, cell, column, message):
    with pytest.raises(SynergyError) as e:
        specs(tmp_path, f"het,resnet,8,1024,1,1,2G,00:10:00,20,multi,{cell}\n")
    assert f"row 1 (line 2), column {column}" in str(e.value) and message in str(e.value)


def test_a_batch_no_split_can_keep_within_the_measured_sizes_is_refused(tmp_path):
    # 40 samples: each card's share would be 0 or under the 32 the traces start at, or
    # all on one card, which the plan would rather not use.
    with pytest.raises(SynergyError, match="column hetero: .*(no split|no samples)"):
        specs(tmp_path, f"het,resnet,8,40,1,1,2G,00:10:00,20,multi,{CELL}\n")


def test_its_gpus_are_the_cells_alone(tmp_path):
    with pytest.raises(SynergyError) as e:
        specs(tmp_path, f"het,resnet,8,1024,1,1,local1g,00:10:00,{CELL}\n",
              head="name,arch,depth,batch,gpus,cpus,gpu_type,time,hetero\n")
    assert "column gpus: a hetero row names its GPUs" in str(e.value)
    assert "column gpu_type: a hetero row names its GPUs" in str(e.value)
