"""The script probe on real scripts run here (no Slurm): what it counts and times, how it
ends a script, what it sets, and the one-line reasons when there is nothing to measure."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import UserDict
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from slurm_synergy.probe.recorder import batch_size
from slurm_synergy.probe.supervise import script_name
from slurm_synergy.probe.tree import ProcessTree, page_kib
from slurm_synergy.model.options import declared_options, spelling, value_of, without
from tests.helpers import CORPUS, LOOP

ROOT = Path(__file__).resolve().parents[2]

def probe(tmp_path: Path, *options: str, script: str = LOOP, args=()) -> tuple:
    path = tmp_path / "train.py"
    path.write_text(script)
    out = tmp_path / "probe.json"
    proc = subprocess.run([sys.executable, "-m", "slurm_synergy.probe", *options, "--out",
                           str(out), "--", str(path), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    result = json.loads(out.read_text()) if out.exists() else None
    return proc, result


def test_batch_size_of_nested_batches():
    import torch

    x = torch.zeros(5, 3)
    assert batch_size(x) == 5 and batch_size((x, torch.zeros(5))) == 5
    assert batch_size([{"data": x, "label": x}]) == 5        # DALI's list of dicts
    assert batch_size({"ids": torch.zeros(7, 128)}) == 7
    assert batch_size(torch.tensor(3.0)) is None and batch_size(["a", "b"]) is None
    # A Hugging Face collator's BatchEncoding is a UserDict, not a dict.
    assert batch_size(UserDict(input_ids=torch.zeros(16, 48), labels=x)) == 16

    class Hostile(UserDict):
        def values(self):
            raise RuntimeError("no")
    assert batch_size(Hostile(a=x)) is None


@pytest.mark.parametrize("argv,name", [
    (["train.py", "--lr", "1"], "train.py"),
    ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "ddp.py"],
     "ddp.py"),
    ([sys.executable, "-m", "profiler.train", "--batch", "4"], "profiler.train"),
    (["./run.sh", "-m"], "./run.sh"),
])
def test_messages_name_the_script_a_module_or_the_program(argv, name):
    assert script_name(argv) == name


def test_train_mode_measures_n_steps_after_the_warm_up_then_ends_the_script(tmp_path):
    proc, result = probe(tmp_path, "--workers", "0", "--warmup", "2", "--iterations", "15")
    assert proc.returncode == 0, proc.stderr
    assert "done" not in proc.stdout            # ended cleanly before its own end
    assert result["ok"] and result["exit_status"] == 0
    (rec,) = result["processes"]
    assert rec["state"] == "measured" and rec["workers_set"] == 0 and rec["loaders"] == [
        "DataLoader"]
    # 2 warm-up batches, 15 measured steps: the 18th request ends the script. The epoch
    # boundary at 12 batches is crossed.
    assert (rec["batches"], rec["steps"], rec["samples"]) == (17, 15, 120)
    m = result["measurement"]
    assert m["samples_per_s"] == pytest.approx(120 / rec["seconds"])
    assert 0 <= m["data_wait_share"] <= 1 and m["dataset_len"] == 96
    assert m["peak_rss_mb"] > 50
    assert "samples/s over 15 steps" in proc.stderr


# Takes 120 MB more at its 18th batch, the first past a measurement of 2 + 15: at once,
# and with seconds to spare, since CI runs the unit tests at nice 19 on a busy machine.
GROWS = textwrap.dedent("""\
    import time
    from torch.utils.data import DataLoader
    held = None
    for i, batch in enumerate(DataLoader(list(range(100000)), batch_size=1)):
        if i == 17:
            held = b"x" * (120 << 20)
        time.sleep(0.01)
    print("done", flush=True)
    """)


def test_peak_lets_the_measured_script_train_on_while_its_memory_is_read(tmp_path):
    """A peak is a maximum over time: the measured steps' own seconds may miss it."""
    peaks = {}
    for options in ((), ("--peak", "6")):
        proc, result = probe(tmp_path, "--workers", "0", "--warmup", "2", "--iterations",
                             "15", *options, script=GROWS)
        assert proc.returncode == 0 and result["ok"], proc.stderr
        assert "done" not in proc.stdout                    # ended by the probe all the same
        (rec,) = result["processes"]
        assert (rec["state"], rec["steps"]) == ("measured", 15)     # the rest uncounted
        peaks[options] = result["measurement"]["peak_rss_mb"]
    assert peaks[("--peak", "6")] > peaks[()] + 90


# Its iterator a global, alive until the interpreter's exit: multiprocessing then
# terminates the loader's workers, and each leaves its socket folder (pymp-*).
HELD = textwrap.dedent("""\
    import torch
    from torch.utils.data import DataLoader
    it = iter(DataLoader([torch.zeros(4)] * 96, batch_size=8, num_workers=2))
    for _ in range(12):
        next(it)
    """)


def test_a_script_ended_mid_epoch_leaves_no_temporary_folder(tmp_path, monkeypatch,
                                                              short_tmp):
    """Its loader workers, terminated at its exit, would leave their socket folders in
    the node's /tmp, one a profiling step."""
    monkeypatch.setenv("TMPDIR", str(short_tmp))
    proc, result = probe(tmp_path, "--warmup", "2", "--iterations", "5", script=HELD)
    assert proc.returncode == 0 and result["ok"], proc.stderr
    assert result["processes"][0]["batches"] == 7      # ended inside its first epoch
    assert list(short_tmp.iterdir()) == []


# Persistent workers, the loader a local freed as main() returns: PyTorch then shuts the
# workers down itself, and they leave nothing behind.
PERSISTENT = textwrap.dedent("""\
    import torch
    from torch.utils.data import DataLoader

    def main():
        loader = DataLoader([torch.zeros(4)] * 32, batch_size=8, num_workers=2,
                            persistent_workers=True)
        for _ in range(2):
            for batch in loader:
                pass

    main()
    print("done", flush=True)
    """)


def test_a_watched_run_ends_its_loader_as_it_would_alone(tmp_path, monkeypatch, short_tmp):
    """The hooks hold no strong reference from a loader's iterator back to the loader:
    with persistent workers that would be a cycle, alive until the interpreter's exit,
    where multiprocessing terminates the workers and each leaves a socket folder."""
    monkeypatch.setenv("TMPDIR", str(short_tmp))
    proc, result = probe(tmp_path, "--mode", "watch", script=PERSISTENT)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr
    assert result["processes"][0]["batches"] == 8
    assert list(short_tmp.iterdir()) == []


def test_the_workers_are_set_whatever_the_script_asks(tmp_path):
    proc, result = probe(tmp_path, "--mode", "watch", "--workers", "1", args=("map", "1"))
    assert proc.returncode == 0, proc.stderr
    assert "workers 1 done 12" in proc.stdout     # watch mode: the script runs to its end
    assert result["processes"][0]["workers_set"] == 1


def test_watch_mode_keeps_the_scripts_exit_status(tmp_path):
    proc, result = probe(tmp_path, "--mode", "watch", "--warmup", "0", args=("map", "2", "3"))
    assert proc.returncode == 3 and "done 24" in proc.stdout
    # The request that finds the loader empty ends the last step too.
    assert result["measurement"]["steps"] == 24


def test_loader_and_compute_modes_on_an_iterable_dataset(tmp_path):
    for mode in ("loader", "compute"):
        proc, result = probe(tmp_path, "--mode", mode, "--iterations", "30",
                             args=("stream", "1"))
        assert proc.returncode == 0, proc.stderr
        rec = result["processes"][0]
        # One epoch holds 12 batches: loader mode starts another, compute mode replays.
        assert rec["steps"] == 30 and rec["samples"] == 240, mode
        assert result["measurement"]["dataset_len"] is None    # a stream has no length
    assert rec["batches"] == 33


def test_dali_threads_are_set_by_the_probe(tmp_path):
    images = tmp_path / "images"
    from profiler.datagen import ensure_image_dataset
    ensure_image_dataset(images, num_images=40, image_size=32, num_classes=2)
    script = textwrap.dedent(f"""\
        from nvidia.dali import fn, pipeline_def
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        @pipeline_def
        def pipe():
            jpegs, labels = fn.readers.file(file_root="{images}", name="Reader")
            return fn.decoders.image(jpegs, device="cpu"), labels

        p = pipe(batch_size=4, num_threads=4, device_id=None)
        p.build()
        print("threads", p.num_threads, flush=True)
        for epoch in range(10):
            for batch in DALIGenericIterator(p, ["x", "y"], reader_name="Reader"):
                pass
        """)
    proc, result = probe(tmp_path, "--workers", "2", "--iterations", "12", script=script)
    assert proc.returncode == 0, proc.stderr
    assert "threads 2" in proc.stdout
    rec = result["processes"][0]
    assert rec["loaders"] == ["DALI"] and rec["steps"] == 12 and rec["samples"] == 48
    assert rec["dataset_len"] == 40


def test_a_script_that_batches_by_hand_is_measured_by_its_optimizer_steps(tmp_path):
    # 20 steps of its own: short of the plan's 3 + 20, measured on the steps it took.
    out = tmp_path / "probe.json"
    proc = subprocess.run([sys.executable, "-m", "slurm_synergy.probe", "--out", str(out),
                           "--", str(CORPUS / "manual_batches.py")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "done" in proc.stdout
    result = json.loads(out.read_text())
    (rec,) = result["processes"]
    assert result["ok"] and rec["loaders"] == ["optimizer"] and rec["steps"] == 16
    assert not rec["batch_size_known"] and rec["samples"] == rec["steps"]


def test_a_script_that_updates_its_weights_by_hand_is_measured_by_its_backward_passes(
        tmp_path):
    # No DataLoader, no optimizer: the steps are autograd's backward passes (the first
    # only waits for an optimizer that might step after it).
    proc, result = probe(tmp_path, script=(CORPUS / "hand_updates.py").read_text(),
                         args=("60",))
    assert proc.returncode == 0, proc.stderr
    (rec,) = result["processes"]
    assert result["ok"] and rec["loaders"] == ["backward"] and rec["steps"] == 20
    assert rec["batches"] == 23 and not rec["batch_size_known"]


def test_a_backward_pass_inside_a_backward_pass_is_not_a_step(tmp_path):
    # Reentrant checkpointing runs a backward inside each step's backward: counted twice,
    # 20 steps would reach the plan's 23 and the probe would stop the script before its end.
    proc, result = probe(tmp_path, script=(CORPUS / "hand_updates.py").read_text(),
                         args=("20", "0", "checkpoint"))
    assert proc.returncode == 0 and proc.stdout.endswith("done\n"), proc.stderr
    (rec,) = result["processes"]
    assert rec["loaders"] == ["backward"] and rec["batches"] == 19


@pytest.mark.parametrize("script,options,words", [
    ("bad_import.py", [], "bad_import.py failed before its first batch: ModuleNotFoundError: "
                          "No module named 'a_module_that_does_not_exist'"),
    ("bad_no_training.py", [], "bad_no_training.py ended without taking a batch from a "
                               "PyTorch DataLoader or a DALI iterator, stepping an "
                               "optimizer or running a backward pass: nothing to measure "
                               "(a forward-only loop has no training step)"),
    ("bad_spawns.py", [], "bad_spawns.py took no batch in its own processes; it started "
                          "processes the probe cannot follow ("),
    # Stopped while its child still imports and trains: the child is named all the same.
    ("bad_spawns.py", ["--time-limit", "3"], "bad_spawns.py took no batch in its own "
                                             "processes; it started processes the probe "
                                             "cannot follow ("),
    ("bad_forever.py", ["--time-limit", "5"], "bad_forever.py took no batch from a PyTorch "
                                              "DataLoader or a DALI iterator, stepped no "
                                              "optimizer and ran no backward pass in 5s"),
])
def test_scripts_with_nothing_to_measure_get_one_reason(tmp_path, script, options, words):
    out = tmp_path / "probe.json"
    proc = subprocess.run([sys.executable, "-m", "slurm_synergy.probe", *options, "--out",
                           str(out), "--", str(CORPUS / script)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1
    result = json.loads(out.read_text())
    assert not result["ok"] and words in result["reason"]
    assert f"probe: error: {result['reason']}" in proc.stderr
    assert result["measurement"] is None
    # A run of it measures nothing again (its workload is held), unless it failed.
    assert result["no_step"] is (script != "bad_import.py")


def test_a_script_shorter_than_the_plan_is_measured_on_the_steps_it_had(tmp_path):
    # One epoch of 12 batches: 3 warm-up and 9 measured steps, of the 50 asked for. The
    # script ran to its end ("done"), as it does unprobed.
    proc, result = probe(tmp_path, "--iterations", "50", args=("map", "1"))
    assert proc.returncode == 0 and result["ok"], result["reason"]
    assert "done 12" in proc.stdout
    assert result["measurement"]["steps"] == 9 and result["measurement"]["samples"] == 72


def test_a_script_that_ends_too_soon_is_not_a_measurement(tmp_path):
    # 9 warm-up batches of 12 leave 3 measured steps: too few to tell a rate.
    proc, result = probe(tmp_path, "--warmup", "9", "--iterations", "50",
                         args=("map", "1"))
    assert proc.returncode == 1
    assert "ended after 12 batch(es), before the probe's 9 warm-up and 50 measured" in \
        result["reason"]
    # A script that exits with an error after enough steps is no measurement either.
    proc, result = probe(tmp_path, "--iterations", "50", args=("map", "1", "3"))
    assert proc.returncode != 0 and not result["ok"] and result["exit_status"] == 3


def test_declared_options_are_read_from_the_source_without_running_it(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import argparse\np = argparse.ArgumentParser()\nadd = p.add_argument\n"
                      "add('-b', '--batch-size', type=int)\np.add_argument('--max_iterations')\n"
                      "p.add_argument('-j', '--json', action='store_true')\n"
                      "p.add_argument('-a', type=float)\n"
                      "raise SystemExit('never run')\n")
    declared = declared_options(script)
    # -j means --json here and -a stands alone: neither is taken for ours.
    assert declared == {"-b", "--batch-size", "--max_iterations", "--json"}
    assert spelling("batch", declared) == "--batch-size"
    assert spelling("iterations", declared) == "--max_iterations"
    assert spelling("workers", declared) is None
    assert declared_options(tmp_path / "missing.py") == frozenset()
    (tmp_path / "run.sh").write_text("#!/bin/sh\ntorchrun train.py\n")
    assert declared_options(tmp_path / "run.sh") == frozenset()


def test_options_are_removed_and_read_in_every_spelling():
    argv = ["--data", "/d", "-j", "4", "--workers=3", "-j2", "--lr", "0.1", "-b64"]
    assert without(argv, ["-j", "--workers"]) == ["--data", "/d", "--lr", "0.1", "-b64"]
    assert value_of(argv, ["-b"]) == "64" and value_of(argv, ["--workers", "-j"]) == "2"
    assert value_of(["--data=/x"], ["--data"]) == "/x" and value_of([], ["--data"]) is None


def test_two_loaders_zipped_are_one_step_and_a_second_loader_is_waiting_time(tmp_path):
    script = textwrap.dedent("""\
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Items(Dataset):
            def __init__(self, n):
                self.n = n
            def __len__(self):
                raise NotImplementedError     # some datasets refuse to say
            def __getitem__(self, i):
                if i >= self.n:
                    raise IndexError(i)
                return torch.zeros(2)

        a = DataLoader(Items(400), batch_size=4, num_workers=2,
                       multiprocessing_context="spawn", sampler=range(400))
        b = DataLoader(Items(400), batch_size=4, sampler=range(400))
        for x, y in zip(a, b):
            pass
        for x in DataLoader(Items(8), batch_size=4, sampler=range(8)):   # "validation"
            pass
        """)
    # Zero workers: the spawn context the script asked for must go with them.
    proc, result = probe(tmp_path, "--mode", "watch", "--workers", "0", "--warmup", "0",
                         script=script)
    assert proc.returncode == 0, proc.stderr
    rec = result["processes"][0]
    assert rec["steps"] == 100 and rec["samples"] == 400 and rec["dataset_len"] is None


def test_a_loader_made_anew_each_epoch_keeps_counting_and_validation_does_not(tmp_path):
    # Three epochs, each with a training loader made anew (25 batches) and a validation
    # loader after it (5 batches): the steps are the training loaders' alone.
    script = textwrap.dedent("""\
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        train, val = TensorDataset(torch.zeros(100, 2)), TensorDataset(torch.zeros(20, 2))
        for epoch in range(3):
            for x in DataLoader(train, batch_size=4, shuffle=True):
                pass
            for x in DataLoader(val, batch_size=4):
                pass
        """)
    proc, result = probe(tmp_path, "--mode", "watch", "--warmup", "0", script=script)
    assert proc.returncode == 0, proc.stderr
    rec = result["processes"][0]
    # A step ends when the next training batch is asked for (the epoch's end too): known
    # by its id, the first epoch's loader alone would count, 25 steps.
    assert rec["steps"] == 75 and rec["samples"] == 300


def test_a_loader_read_by_another_thread_is_ended_once_measured(tmp_path):
    script = textwrap.dedent("""\
        import queue, threading, time
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        batches = queue.Queue(maxsize=2)
        def prefetch():
            while True:
                for b in DataLoader(TensorDataset(torch.zeros(64, 2)), batch_size=4):
                    batches.put(b)
        threading.Thread(target=prefetch, daemon=True).start()
        while True:
            batches.get()
            time.sleep(0.01)
        """)
    proc, result = probe(tmp_path, "--iterations", "10", script=script)
    assert proc.returncode == 0, proc.stderr
    assert result["ok"] and result["processes"][0]["steps"] == 10


def test_watch_mode_leaves_sigterm_to_the_script_once(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import signal, sys, time
        def handler(signum, frame):
            print("checkpoint", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, handler)
        print("ready", flush=True)
        time.sleep(60)
        """))
    proc = subprocess.Popen([sys.executable, "-m", "slurm_synergy.probe", "--mode", "watch",
                             "--out", str(tmp_path / "probe.json"), "--",
                             str(tmp_path / "train.py")], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, signal.SIGTERM)     # as Slurm signals every process of a step
    out, _ = proc.communicate(timeout=60)
    assert out == "checkpoint\n" and proc.returncode == 0


COW_TREE = """\
import os, sys, time
block = bytearray(200 * 2**20)
block[::4096] = b"x" * len(block[::4096])     # every page touched: 200 MB anonymous
if os.fork() == 0:
    time.sleep(60)                            # shares every page with its parent
    os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""

# Maps the file it is given and reads every page: 100 MB of file pages, as a trainer
# maps libtorch; another job on the node maps the same file.
FILE_MAPPER = """\
import mmap, sys, time
with open(sys.argv[1], "rb") as fh:
    pages = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
sum(pages[i] for i in range(0, len(pages), 4096))
print("ready", flush=True)
time.sleep(60)
"""


@contextlib.contextmanager
def running(code: str, *args: str) -> Iterator[int]:
    """`code` running, once it has printed "ready": its pid. Killed after, with its
    children."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def looked(pid: int) -> ProcessTree:
    tree = ProcessTree(pid)
    tree.look()
    return tree


def test_the_tree_counts_memory_as_its_cgroup_would_each_page_once():
    # A parent and its fork share 200 MB copy-on-write, as a DataLoader worker shares its
    # trainer's: their RSS adds up to 400 MB, their footprint and its anonymous part to
    # 200 MB and a little of Python's own.
    with running(COW_TREE) as pid:
        tree = looked(pid)
        assert tree.peak_rss_mb > 390
        assert tree.peak_pss_mb is not None and 195 < tree.peak_pss_mb < 260
        assert tree.peak_own_mb is not None and 195 < tree.peak_own_mb < 260
        assert tree.footprint_mb == tree.peak_own_mb
        assert tree.peak_anon_mb is not None and 195 < tree.peak_anon_mb < 240
        pages = page_kib(pid)
        assert pages.own is not None and pages.own <= pages.pss and pages.file > 0
    with pytest.raises(OSError):
        page_kib(pid)


def test_another_job_mapping_the_same_files_leaves_the_footprint_as_it_was(tmp_path):
    # Pss gives a file page to all its mappers in shares: another job on the node that
    # maps the same library halves its share. The footprint counts the file whole, so a
    # profile's memory does not depend on its neighbours (the offline profiler's warm
    # interpreter was one: 35 MB less for resnet8).
    library = tmp_path / "libbig.so"
    library.write_bytes(b"\1" * (100 * 2**20))
    with running(FILE_MAPPER, str(library)) as pid:
        alone = looked(pid)
        with running(FILE_MAPPER, str(library)):
            beside = looked(pid)
    assert alone.footprint_mb > 100 and abs(beside.footprint_mb - alone.footprint_mb) < 5
    assert alone.peak_pss_mb is not None and beside.peak_pss_mb is not None
    assert beside.peak_pss_mb < alone.peak_pss_mb - 40


def test_the_tree_falls_back_to_summed_rss_where_the_kernel_hides_pss(monkeypatch):
    # Without smaps_rollup (before Linux 4.14) the footprint is the processes' resident
    # memory summed: more than the job holds, never less.
    monkeypatch.setattr("slurm_synergy.probe.tree.SMAPS_ROLLUP", False)
    with running(COW_TREE) as pid:
        tree = looked(pid)
        assert tree.peak_pss_mb is None and tree.peak_own_mb is None
        assert tree.peak_anon_mb is None
        assert tree.footprint_mb == tree.peak_rss_mb > 390


def test_the_tree_falls_back_to_pss_where_the_kernel_does_not_split_it(monkeypatch):
    # Before Linux 5.9 smaps_rollup has no Pss_Anon: the footprint is each page once.
    from slurm_synergy.probe import tree as probe_tree
    read = probe_tree.page_kib
    monkeypatch.setattr(probe_tree, "page_kib", lambda pid: read(pid)._replace(own=None))
    with running(COW_TREE) as pid:
        tree = looked(pid)
        assert tree.peak_own_mb is None and tree.peak_anon_mb is None
        assert tree.peak_pss_mb is not None and tree.footprint_mb == tree.peak_pss_mb < 260


def test_a_worker_exiting_while_it_is_read_leaves_the_tree_measured(monkeypatch):
    # A loader worker ending at its epoch's end: psutil still sees it, but its
    # smaps_rollup has no pages left (or the read fails). A bench's offline profile
    # once lost its footprint to one (it fell back to the RSS summed for good).
    from slurm_synergy.probe import tree as probe_tree
    read = probe_tree.page_kib
    with running(COW_TREE) as pid:
        (worker,) = psutil.Process(pid).children()

        def exiting(other: int) -> probe_tree.PageKib:
            if other == worker.pid:
                raise ProcessLookupError(f"process {other} maps no memory")
            return read(other)
        monkeypatch.setattr(probe_tree, "page_kib", exiting)
        tree = looked(pid)
        # Known, from the trainer's share (the mock worker still holds its half).
        assert tree.peak_own_mb is not None and 95 < tree.peak_own_mb < 160
        assert tree.peak_anon_mb is not None and tree.footprint_mb == tree.peak_own_mb
