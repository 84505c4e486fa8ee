"""Fingerprints: stable, blind to what gets tuned, sensitive to what decides sensitivity."""

import dataclasses

from slurm_synergy.model.comment import fingerprint as fingerprint_of_comment
from slurm_synergy.model.jobspec import BUILTIN_ARCHS, JobSpec, RowRef


def spec(**changes) -> JobSpec:
    base = JobSpec(name="j", script="builtin:train", arch="resnet", depth=18, batch=64, workers=4,
                   dataset="synthetic", gpus=1, gpu_type="", cpus=5, mem_mb=4096,
                   time="01:00:00", partition="", iterations=None, epochs=None,
                   loader="pytorch", args=(), output_folder="", port=None,
                   submit_interval_s=0.0, source=RowRef("x.csv", 1, 2), row_digest="d")
    return dataclasses.replace(base, **changes)


def test_fingerprint_ignores_tuned_resources():
    fp = spec().fingerprint
    assert len(fp) == 16
    assert spec(workers=12, cpus=13, mem_mb=99999, name="other", time="5").fingerprint == fp


def test_fingerprint_follows_the_workload():
    fp = spec().fingerprint
    for change in ({"batch": 128}, {"depth": 50}, {"arch": "mobilenet"}, {"gpus": 2},
                   {"gpu_type": "a100"}, {"dataset": "/data/imagenet"}, {"loader": "dali"},
                   {"script": "/home/u/train.py"}):
        assert spec(**change).fingerprint != fp, change


def test_comment_round_trip():
    s = spec()
    assert fingerprint_of_comment(s.comment) == s.fingerprint
    assert fingerprint_of_comment("someone else's comment") is None


def test_builtin_archs_match_the_trainer():
    from profiler.models import MODELS

    assert tuple(sorted(BUILTIN_ARCHS)) == tuple(sorted(MODELS))


def test_builtin_options_that_change_the_cost_per_sample_are_in_the_fingerprint():
    fp = spec().fingerprint
    assert spec(args=("--seed", "3")).fingerprint == fp
    assert spec(args=("--image-size", "512")).fingerprint != fp
    assert spec(args=("--crop=32",)).fingerprint != fp


def test_a_users_script_is_known_by_its_content_and_arguments(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("print('train')\n")
    b.write_text("print('train')\n")

    def user(path, options=("--batch-size", "64"), args=(), **more):
        return spec(script=str(path), arch="", depth=None, script_options=options, args=args,
                    workers_options=("-j",), **more).fingerprint

    fp = user(a)
    assert user(b) == fp                                    # a copy elsewhere: the same
    assert user(a, args=("-j", "12"), workers=12) == fp     # the worker count is tuned
    assert user(a, options=("--batch-size", "128")) != fp
    assert user(a, args=("--seed", "3")) != fp              # we cannot tell its options apart
    assert user(a, procs=2) != fp and user(a, gpus=2) != fp
    b.write_text("print('train, edited')\n")
    assert user(b) != fp


def test_generated_datasets_get_a_folder_per_generation_setting():
    assert spec().synthetic_data_name == "synthetic-jpeg"
    assert spec(args=("--crop", "32")).synthetic_data_name == "synthetic-jpeg"
    big = spec(args=("--image-size", "512", "--dataset-size", "256")).synthetic_data_name
    assert big.startswith("synthetic-jpeg-") and big != spec(
        args=("--image-size", "256")).synthetic_data_name


def test_the_comment_says_which_resources_the_row_pinned():
    s = spec(pinned=("cpus", "mem"))
    assert s.comment == f"synergy:fp={s.fingerprint} req=cpus,mem work={s.work}"
    assert fingerprint_of_comment(s.comment) == s.fingerprint


def test_the_comment_says_the_built_in_trainers_work_and_args_win():
    assert spec(iterations=160).work == "i160"
    assert spec(iterations=None, epochs=3).work == "e3"
    assert spec(iterations=None, epochs=None).work == "e1"
    assert spec(iterations=160, args=("--max-iterations", "40")).work == "i40"
    assert spec(iterations=None, epochs=2, args=("--max-iterations=x",)).work == "e2"
