"""Job-list validation: every malformed file is refused with file/row/column messages."""

from pathlib import Path

import pytest

from slurm_synergy.submission.csvjobs import CsvError, load_jobs

TORCHLOADER_HEADER = "arch,depth,batch,workers,output_folder,port,submit_interval,cuda_device\n"


def write(tmp_path: Path, text: str, name: str = "jobs.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(CsvError) as info:
        load_jobs(path)
    return info.value.problems


def test_torchloader_readme_rows_parse_unchanged(tmp_path):
    path = write(tmp_path, TORCHLOADER_HEADER
                 + 'resnet,12,128,1,single_1workers_1device,5336,10,"0 1"\n'
                 + 'resnet,14,128,1,single_1workers_1device,5337,20,"0 2"\n'
                 + 'resnet,16,128,1,single_1workers_1device,5338,30,"3 4"\n')
    specs = load_jobs(path)
    assert [s.depth for s in specs] == [12, 14, 16]
    assert [s.gpus for s in specs] == [2, 2, 2]
    assert [s.submit_interval_s for s in specs] == [10, 20, 30]
    assert [s.port for s in specs] == [5336, 5337, 5338]
    assert specs[0].gres == "gpu:2"
    assert specs[0].cpus == 2  # one loader worker plus the training process
    assert len({s.name for s in specs}) == 3


def test_missing_required_column(tmp_path):
    out = problems(write(tmp_path, "arch,depth,workers\nresnet,12,1\n"))
    assert out == [f"{tmp_path / 'jobs.csv'} line 1: missing required column 'batch' (or a "
                   "script column naming each row's training script)"]


def test_non_integer_batch_names_row_and_column(tmp_path):
    path = write(tmp_path, TORCHLOADER_HEADER + 'resnet,12,128,1,f,5336,0,"0"\n'
                 + 'resnet,14,big,1,f,5336,0,"0"\n')
    out = problems(path)
    assert len(out) == 1
    assert "row 2 (line 3), column batch: 'big' is not an integer" in out[0]
    assert str(path) in out[0]


def test_unknown_column_suggests_nearest(tmp_path):
    out = problems(write(tmp_path, "arch,batch,wrokers\nresnet,32,2\n"))
    assert "unknown column 'wrokers'; did you mean 'workers'?" in out[0]


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_empty_file(tmp_path, text):
    assert "the file is empty" in problems(write(tmp_path, text))[0]


def test_header_without_rows(tmp_path):
    assert "no job rows" in problems(write(tmp_path, "arch,batch\n"))[0]


def test_wrong_delimiter(tmp_path):
    out = problems(write(tmp_path, "arch;depth;batch\nresnet;12;32\n"))
    assert "separated by semicolons" in out[0]


def test_duplicate_job_names(tmp_path):
    out = problems(write(tmp_path, "name,arch,batch\nrun1,resnet,32\nrun1,resnet,64\n"))
    assert "row 2 (line 3), column name: 'run1' is already the name of row 1" in out[0]


@pytest.mark.parametrize("column,value", [
    ("name", "resnet; touch /tmp/x"),
    ("arch", "resnet; touch /tmp/x"),
    ("gpu_type", "a100$(reboot)"),
    ("partition", "gpu`id`"),
    ("time", "1:00:00; rm -rf ~"),
    ("output_folder", "../../etc"),
    ("mem", "4G && id"),
])
def test_shell_metacharacters_are_refused(tmp_path, column, value):
    cells = {"arch": "resnet", "batch": "32", column: value}
    header = ",".join(cells)
    row = ",".join(f'"{v}"' for v in cells.values())
    out = problems(write(tmp_path, f"{header}\n{row}\n"))
    assert any(f"column {column}:" in p for p in out), out


def test_every_bad_row_is_reported_at_once(tmp_path):
    path = write(tmp_path, "arch,batch,workers,loader\nresnet,0,1,pytorch\n"
                 "resnot,32,x,pytorch\nresnet,32,1,tensorflow\n")
    out = problems(path)
    assert len(out) == 4
    assert "column batch: 0 is out of range" in out[0]
    assert "column arch: 'resnot' is not a built-in model" in out[1]
    assert "did you mean 'resnet'?" in out[1]
    assert "column workers: 'x' is not an integer" in out[2]
    assert "column loader: 'tensorflow' is not a data loader" in out[3]


def test_ragged_row(tmp_path):
    out = problems(write(tmp_path, "arch,batch,workers\nresnet,32\n"))
    assert "row 1 (line 2): 2 cells but the header has 3 columns" in out[0]


def test_cuda_device_and_gpus_must_agree(tmp_path):
    out = problems(write(tmp_path, 'arch,batch,gpus,cuda_device\nresnet,32,1,"0 1"\n'))
    assert "column gpus: 1 disagrees with cuda_device" in out[0]
    out = problems(write(tmp_path, 'arch,batch,cuda_device\nresnet,32,"0 0"\n'))
    assert "column cuda_device" in out[0]


def test_missing_script_and_dataset(tmp_path):
    out = problems(write(tmp_path, "arch,batch,script,dataset\nresnet,32,nope.py,/no/such/dir\n"))
    assert any("column script: 'nope.py': no such file" in p for p in out)
    assert any("column dataset: '/no/such/dir': no such folder" in p for p in out)


def test_script_must_be_python_or_executable(tmp_path):
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    out = problems(write(tmp_path, "name,script\nmine,run.sh\n"))
    assert "neither a .py file nor executable" in out[0]
    (tmp_path / "run.sh").chmod(0o755)
    spec = load_jobs(tmp_path / "jobs.csv")[0]
    assert spec.script == str(tmp_path / "run.sh") and not spec.builtin


def test_project_columns(tmp_path):
    path = write(tmp_path, "name,arch,depth,batch,workers,gpus,gpu_type,cpus,mem,time,partition,"
                 "iterations,loader,args\n"
                 "r18,resnet,18,64,4,2,a100,9,12G,2-00:00:00,gpu,100,dali,\"--lr 0.05 --seed 3\"\n")
    spec = load_jobs(path)[0]
    assert (spec.name, spec.gpus, spec.gpu_type, spec.cpus, spec.mem_mb) == ("r18", 2, "a100", 9, 12288)
    assert spec.gres == "gpu:a100:2"
    assert (spec.time, spec.partition, spec.iterations, spec.loader) == ("2-00:00:00", "gpu", 100, "dali")
    assert spec.args == ("--lr", "0.05", "--seed", "3")


def test_iterations_and_epochs_exclusive(tmp_path):
    out = problems(write(tmp_path, "arch,batch,iterations,epochs\nresnet,32,10,2\n"))
    assert "column epochs: give iterations or epochs, not both" in out[0]


def test_unbalanced_quotes_in_args(tmp_path):
    out = problems(write(tmp_path, "arch,batch,args\nresnet,32,\"--tag 'oops\"\n"))
    assert "column args" in out[0]


def test_depth_only_for_the_builtin_resnet(tmp_path):
    out = problems(write(tmp_path, "arch,depth,batch\nmobilenet,12,32\n"))
    assert "column depth: the built-in mobilenet has a fixed depth" in out[0]
