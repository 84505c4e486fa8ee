"""The GPU checks of docs/gpu-validation.md as one script, for one short lease of a GPU
machine: each check runs on its own (one failing leaves the others' figures) and writes
its figures to --out as JSON, with a summary line per check on stdout.

    backend   the GPU backend beside nvidia-smi: names, UUIDs, memory, power, the
              energy counter, the power-limit range
    cgroup    the machine's cgroup layout; on cgroup v2, a job cgroup made where Slurm
              makes one, read by the hooks' reader beside the kernel's own files
    hooks     the installed prolog/epilog on real NVML: a limit set and restored, again
              after the job's process is killed with SIGKILL; the epilog's per-job energy
              against NVML's counter read before the prolog and after the epilog (ratio)
    gpumem    the peak-memory estimate against torch.cuda.max_memory_allocated for
              two built-in ResNets at three batch sizes (ratio)
    gpuoom    jobs run under the hooks that end in torch's CUDA out-of-memory error,
              growing step by step and in one burst: whether the epilog's peak reaches
              the rescue's GPU_FULL share of the board (decisions/rescue.py)
    sampler   bench/bench_sampler.py at 1 s and 0.1 s (the slowdown of a CUDA loop)
    sweep     the offline profiler's core sweep of the built-in ResNet-18 on JPEGs with
              every core the machine has (local launcher; no Slurm there)

Run from the repository root, as root (power limits, cgroups), with the machine's own
Python (torch with CUDA, nvidia-ml-py, psutil, jinja2):

    PYTHONPATH=. python3 bench/gpu_check.py --out "$OUT" [--only hooks,gpumem]

Exits 1 where a check failed or could not run (no GPU: every GPU check says so).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy.gpu import open_backend  # noqa: E402
from slurm_synergy.gpu.device import Backend  # noqa: E402
from slurm_synergy.hooks import jobcgroup  # noqa: E402
from slurm_synergy.hooks.install import HookPaths, render_wrappers  # noqa: E402
from slurm_synergy.hooks.records import RecordError, read_stats, stats_path  # noqa: E402

SMI_FIELDS = ("index,name,uuid,pci.bus_id,memory.total,memory.used,power.draw,power.limit,"
              "power.min_limit,power.max_limit,power.default_limit")
# A CUDA loop for the hooks' jobs: argv[1] seconds of matrix products on GPU 0.
CUDA_LOOP = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.monotonic() + float(sys.argv[1])
print("running", flush=True)
while time.monotonic() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""
# A run that ends in torch's CUDA out-of-memory error (exit 1), as training does when a
# config grows: argv[1] "grow" adds a GiB each 0.2 s (activations growing step by step);
# "burst" holds half the board, then asks for more than is left in one allocation (a
# larger batch's first forward pass) and exits at once.
CUDA_OOM = """
import sys, time, torch
free, total = torch.cuda.mem_get_info()
held = []
print("running", flush=True)
if sys.argv[1] == "burst":
    held.append(torch.empty(int(total * 0.5), dtype=torch.uint8, device="cuda"))
    time.sleep(3)
    held.append(torch.empty(int(total * 0.6), dtype=torch.uint8, device="cuda"))
while True:
    held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
    time.sleep(0.2)
"""
NODE = "gpucheck"


class CheckFailed(Exception):
    """A check ran and found something wrong, or could not run; its message says which."""


def smi() -> list[dict[str, str]]:
    """nvidia-smi's reading of every GPU, by its field names."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise CheckFailed(f"nvidia-smi: {e}") from None
    names = SMI_FIELDS.split(",")
    return [dict(zip(names, (v.strip() for v in line.split(",")))) for line in
            out.splitlines() if line.strip()]


def backend_with_gpus() -> Backend:
    """The backend the hooks use; CheckFailed where it reaches no GPU."""
    backend = open_backend()
    if not backend.gpus:
        raise CheckFailed(f"no GPU through the backend ({backend.name}: {backend.reason})")
    return backend


def first_gpu() -> Any:
    """GPU 0 through the backend the hooks use; CheckFailed where there is none."""
    return backend_with_gpus().gpus[0]


def check_backend(out: Path) -> str:
    """The backend's figures beside nvidia-smi's."""
    backend = backend_with_gpus()
    ours = []
    for g in backend.gpus:
        r, s = g.power_range(), g.sample()
        ours.append({"uuid": g.info.uuid, "pci_bus_id": g.info.pci_bus_id, "name": g.info.name,
                     "minor": g.info.minor, "shared": g.info.shared,
                     "power_limit_mw": g.power_limit_mw(), "min_mw": r.min_mw,
                     "max_mw": r.max_mw, "default_mw": r.default_mw,
                     "energy_mj": g.energy_mj(), "util_pct": s.util_pct,
                     "sm_active_pct": s.sm_active_pct, "mem_used_mb": s.mem_used_mb,
                     "power_mw": s.power_mw})
    theirs = smi()
    _write(out / "backend.json", {"backend": backend.name, "ours": ours, "nvidia_smi": theirs})
    wrong = [f"GPU {o['uuid']}: {what}" for o, t in zip(ours, theirs) for what, ok in (
        ("UUID", o["uuid"] == t["uuid"]),
        ("limit", abs(o["power_limit_mw"] / 1000 - float(t["power.limit"])) < 1),
        ("max limit", abs(o["max_mw"] / 1000 - float(t["power.max_limit"])) < 1)) if not ok]
    if len(ours) != len(theirs) or wrong:
        raise CheckFailed(f"{len(ours)} GPUs against nvidia-smi's {len(theirs)}; differ: "
                          f"{wrong}")
    return f"{len(ours)} GPU(s) agree with nvidia-smi (UUID, limit, range)"


def _hooks_folder(period_s: float) -> tuple[Path, HookPaths, int, int, int]:
    """The wrappers rendered into a folder of their own with a policy sampling every
    `period_s`: (folder, paths, the GPU's default limit, a limit to ask, its minor)."""
    gpu = first_gpu()
    r = gpu.power_range()
    default_w = (r.default_mw or r.max_mw) // 1000
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-hooks-"))
    policy = folder / "policy.toml"
    policy.write_text(f"power_cap_w = {default_w}\ngpu_sample_period_s = {period_s}\n")
    where = HookPaths(stats_dir=folder / "stats", log=folder / "hooks.log",
                      run_dir=folder / "run", policy=policy)
    render_wrappers(folder, where)
    minor = gpu.info.minor if gpu.info.minor is not None else 0
    return folder, where, default_w, (r.min_mw + r.max_mw) // 2000, minor


def _hooked(folder: Path, where: HookPaths, job: str, minor: int, target_w: int,
            argv: list[str], kill_after_s: float | None = None) -> dict[str, Any]:
    """One job as slurmd runs it: the prolog, `argv` (killed with SIGKILL after
    `kill_after_s` where given), the epilog; what each did and the epilog's record."""
    # Absolute: the wrappers run the hooks from another folder, as slurmd does.
    pythonpath = os.pathsep.join([*(os.path.abspath(p) for p in os.environ.get(
        "PYTHONPATH", "").split(os.pathsep) if p), str(ROOT)])
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": pythonpath,
           "SLURM_JOB_ID": job, "SLURMD_NODENAME": NODE, "SLURM_JOB_GPUS": str(minor),
           "SLURM_JOB_COMMENT": f"fp=a decision=c1,m512,g1,w0,p{target_w}",
           # The stand-in pynvml's state, where the script is tried without a GPU.
           **{k: v for k, v in os.environ.items() if k.startswith("FAKE_NVML")}}
    gpu = first_gpu()
    before_mj = gpu.energy_mj()
    prolog = subprocess.run(["/bin/sh", str(folder / "synergy-prolog")], env=env,
                            timeout=120).returncode
    during_w = gpu.power_limit_mw() / 1000
    run = subprocess.Popen([sys.executable, "-c", *argv], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    assert run.stdout is not None
    run.stdout.readline()                     # "running": CUDA is up
    if kill_after_s is not None:
        time.sleep(kill_after_s)
        os.kill(run.pid, signal.SIGKILL)
    err = run.communicate(timeout=600)[1]
    epilog = subprocess.run(["/bin/sh", str(folder / "synergy-epilog")], env=env,
                            timeout=120).returncode
    after_mj = gpu.energy_mj()
    try:
        stats = read_stats(stats_path(where.stats_dir, job, NODE))
    except RecordError as e:
        raise CheckFailed(f"job {job}: {e}; the hooks' log: "
                          + " | ".join(where.log.read_text().splitlines()[-4:])) from None
    if not stats.gpus:
        raise CheckFailed(f"job {job}: the epilog recorded no GPU; the hooks' log: "
                          + " | ".join(where.log.read_text().splitlines()[-4:]))
    return {"prolog_rc": prolog, "epilog_rc": epilog, "limit_during_w": during_w,
            "limit_after_w": gpu.power_limit_mw() / 1000, "run_rc": run.returncode,
            "run_stderr_tail": err[-400:], "stats": stats,
            "nvml_counter_j": (after_mj - before_mj) / 1000
            if None not in (after_mj, before_mj) else None}


def check_hooks(out: Path) -> str:
    """The prolog/epilog pair on real NVML, a job run to its end and one killed."""
    folder, where, default_w, target_w, minor = _hooks_folder(1.0)
    jobs = {}
    for job, kill in (("9101", False), ("9102", True)):
        ran = _hooked(folder, where, job, minor, target_w,
                      [CUDA_LOOP, "30" if not kill else "300"], 10.0 if kill else None)
        use, counted_j = ran["stats"].gpus[0], ran["nvml_counter_j"]
        jobs[job] = {"killed": kill, "prolog_rc": ran["prolog_rc"],
                     "epilog_rc": ran["epilog_rc"], "limit_during_w": ran["limit_during_w"],
                     "limit_after_w": ran["limit_after_w"], "asked_w": target_w,
                     "default_w": default_w, "loop_rc": ran["run_rc"],
                     "energy_j": use.energy_j, "energy_source": use.energy_source,
                     "nvml_counter_j": counted_j,
                     "energy_ratio": (use.energy_j / counted_j if use.energy_j and counted_j
                                      else None),
                     "samples": use.samples, "util_mean_pct": use.util_mean_pct,
                     "sm_active_mean_pct": use.sm_active_mean_pct,
                     "mem_peak_mb": use.mem_peak_mb, "mem_total_mb": use.mem_total_mb,
                     "smi_after": smi()[0]}
    _write(out / "hooks.json", {"jobs": jobs, "log": where.log.read_text()})
    wrong = [f"job {j}: {what}" for j, x in jobs.items() for what, ok in (
        ("hooks' exit", x["prolog_rc"] == 0 and x["epilog_rc"] == 0),
        ("limit during", abs(x["limit_during_w"] - target_w) <= 1),
        ("limit after", abs(x["limit_after_w"] - default_w) <= 1),
        ("energy", x["energy_ratio"] is not None and 0.9 <= x["energy_ratio"] <= 1.02))
        if not ok]
    if wrong:
        raise CheckFailed(f"{wrong}; see hooks.json")
    ratios = ", ".join(f"{x['energy_ratio']:.3f}" for x in jobs.values())
    return (f"limit {target_w} W during each job, {default_w} W after (SIGKILL too); "
            f"energy against NVML's counter {ratios}")


def check_gpuoom(out: Path) -> str:
    """Runs that end in CUDA out-of-memory under the hooks, at the policy's default 1 s
    and at 0.25 s: the epilog's peak share of the board against the rescue's GPU_FULL.
    Passes where the run that grows is seen full at 1 s; the burst's figure is reported
    as measured (the rule's known blind spot)."""
    from slurm_synergy.decisions.rescue import GPU_FULL
    runs, seen = {}, []
    job = 9200
    for period in (1.0, 0.25):
        folder, where, _, target_w, minor = _hooks_folder(period)
        for mode in ("grow", "burst"):
            job += 1
            ran = _hooked(folder, where, str(job), minor, target_w, [CUDA_OOM, mode])
            share = ran["stats"].mem_full_share
            runs[f"{mode}@{period}s"] = {
                "job": job, "run_rc": ran["run_rc"], "stderr_tail": ran["run_stderr_tail"],
                "oom_raised": "OutOfMemoryError" in ran["run_stderr_tail"]
                or "out of memory" in ran["run_stderr_tail"],
                "mem_peak_mb": ran["stats"].gpus[0].mem_peak_mb,
                "mem_total_mb": ran["stats"].gpus[0].mem_total_mb,
                "samples": ran["stats"].gpus[0].samples, "full_share": share,
                "rescued": share is not None and share >= GPU_FULL}
            seen.append(f"{mode} at {period:g} s: "
                        + (f"{share:.2f} of the board" if share is not None else "no share"))
    _write(out / "gpuoom.json", {"gpu_full": GPU_FULL, "runs": runs})
    if not all(r["oom_raised"] for r in runs.values()):
        raise CheckFailed("a run did not end in CUDA out-of-memory; see gpuoom.json")
    if not runs["grow@1.0s"]["rescued"]:
        raise CheckFailed(f"the growing run was not seen full at 1 s ({'; '.join(seen)})")
    return "; ".join(seen) + f" (GPU_FULL {GPU_FULL})"


def check_sampler(out: Path) -> str:
    """bench_sampler's slowdown of a CUDA loop at 1 s and 0.1 s."""
    first_gpu()
    results, lines = {}, []
    for period in ("1", "0.1"):
        dest = Path(tempfile.mkdtemp(prefix="gpu-check-sampler-")) / "sampler.json"
        subprocess.run([sys.executable, str(ROOT / "bench" / "bench_sampler.py"), "--rounds",
                        "3", "--seconds", "10", "--period", period, "--out", str(dest)],
                       check=True, timeout=300)
        results[period] = json.loads(dest.read_text())
        lines.append(f"every {period} s: {results[period]['slowdown_pct']}% slowdown")
    _write(out / "sampler.json", results)       # one file: at most 8 come back from $OUT
    return "; ".join(lines)


def check_gpumem(out: Path) -> str:
    """The estimate against two real training steps on the GPU, at three batch sizes."""
    import torch

    from profiler import gpumem
    from profiler.models import DATA_KINDS, VOCAB_SIZE, build_model

    if not torch.cuda.is_available():
        raise CheckFailed("torch sees no CUDA device")
    rows = []
    for arch, depth, crop in (("resnet", 8, 32), ("resnet", 18, 64)):
        kind = DATA_KINDS[arch]
        for batch in (16, 32, 64):
            args = ["-a", arch, "--depth", str(depth), "--crop", str(crop), "-b", str(batch),
                    "--data", "unused"]
            estimate = gpumem.estimate(args, batch)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            model = build_model(arch, depth, VOCAB_SIZE if kind == "text" else gpumem.CLASSES)
            model = model.cuda()
            optimizer = gpumem._optimizer(model)
            for _ in range(2):
                inputs, targets = (t.cuda() for t in gpumem._batch(kind, crop, batch))
                gpumem._step(model, optimizer, inputs, targets)
            torch.cuda.synchronize()
            real = torch.cuda.max_memory_allocated() / gpumem.MIB
            rows.append({"arch": arch, "depth": depth, "crop": crop, "batch": batch,
                         "estimate_mib": estimate.peak_mib, "real_mib": round(real, 3),
                         "ratio": round(estimate.peak_mib / real, 4)})
            del model, optimizer, inputs, targets
    _write(out / "gpumem.json", {"rows": rows})
    off = [r for r in rows if not 0.9 <= r["ratio"] <= 1.1]
    if off:
        raise CheckFailed(f"ratio outside 0.9-1.1: {off}")
    return "ratios " + ", ".join(f"{r['arch']}{r['depth']}/b{r['batch']} {r['ratio']:.3f}"
                                 for r in rows)


def check_sweep(out: Path) -> str:
    """The offline profiler's core sweep on every core, the built-in ResNet-18 on JPEGs."""
    from profiler.datagen import ensure_image_dataset

    first_gpu()
    work = Path(tempfile.mkdtemp(prefix="gpu-check-sweep-"))
    data = ensure_image_dataset(work / "images", num_images=2048, image_size=96)
    cores = len(os.sched_getaffinity(0))
    env = dict(os.environ, SYNERGY_PROFILES=str(work / "store"))
    proc = subprocess.run(
        [sys.executable, "-m", "slurm_synergy.cli", "profile", "--launcher", "local",
         "--workdir", str(work / "steps"), "--fingerprint", "00000000000062aa",
         "--job-name", "gpu-check-resnet18", "builtin:train", "-a", "resnet", "--depth",
         "18", "--data", str(data), "-b", "64"], capture_output=True, text=True, env=env,
        timeout=300)
    (out / "sweep.log").write_text(proc.stdout + proc.stderr)
    stored = list((work / "store").rglob("00000000000062aa.json"))
    if proc.returncode != 0 or not stored:
        raise CheckFailed(f"the profile failed (exit {proc.returncode}); see sweep.log")
    profile = json.loads(stored[0].read_text())
    _write(out / "sweep.json", profile)
    points = [(p["cores"], round(p["samples_per_s"], 1)) for p in profile["points"]
              if p["measure"] == "train"]
    return f"{cores} cores: samples/s by cores {sorted(points)}"


def check_cgroup(out: Path) -> str:
    """The cgroup layout; on v2, the hooks' reader on a job cgroup where Slurm puts one."""
    root = jobcgroup.CGROUP_ROOT
    fs = subprocess.run(["stat", "-fc", "%T", str(root)], capture_output=True,
                        text=True).stdout.strip()
    layout: dict[str, Any] = {"fs": fs, "self": Path("/proc/self/cgroup").read_text(),
                              "top": sorted(p.name for p in root.iterdir())}
    if fs != "cgroup2fs":
        _write(out / "cgroup.json", layout)
        return f"not cgroup v2 ({fs}): layout recorded"
    job = root / "system.slice" / "slurmstepd.scope" / "job_9103"
    child = None
    try:
        job.mkdir(parents=True, exist_ok=True)
        child = subprocess.Popen([sys.executable, "-c", "b = bytearray(300 << 20)\n"
                                  "for i in range(0, len(b), 4096): b[i] = 1\n"
                                  "import time; time.sleep(5)"])
        (job / "cgroup.procs").write_text(str(child.pid))
        child.wait()
        files = jobcgroup.find("9103", "0", NODE, root)
        use = jobcgroup.read(files) if files else None
        layout.update(found=str(files.mem_peak) if files else None,
                      reader_mem_peak_mb=use.mem_peak_mb if use else None,
                      reader_cpu_s=use.cpu_s if use else None,
                      kernel_memory_peak=(job / "memory.peak").read_text().strip(),
                      kernel_cpu_stat=(job / "cpu.stat").read_text())
    except OSError as e:
        layout["error"] = f"could not make a job cgroup: {e}"
    finally:
        if child is not None and child.poll() is None:
            child.kill()
        if job.is_dir():
            job.rmdir()
    _write(out / "cgroup.json", layout)
    if layout.get("error") or layout.get("reader_mem_peak_mb") is None:
        raise CheckFailed(layout.get("error") or "the reader found no job cgroup")
    return (f"v2: reader {layout['reader_mem_peak_mb']:.0f} MB peak, "
            f"{layout['reader_cpu_s']:.2f} s CPU (kernel's files in cgroup.json)")


# The quick ones first: a lease that runs out takes the sweep, not the rest.
CHECKS: dict[str, Callable[[Path], str]] = {
    "backend": check_backend, "cgroup": check_cgroup, "hooks": check_hooks,
    "gpuoom": check_gpuoom, "gpumem": check_gpumem, "sampler": check_sampler, "sweep": check_sweep}


def _write(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")


def main() -> int:
    """Run the checks asked for, in CHECKS' order; 1 where any failed or could not run."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the figures")
    p.add_argument("--only", default="", help=f"comma-separated, of {','.join(CHECKS)}")
    args = p.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CHECKS)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        p.error(f"--only: no check {unknown} (there are {', '.join(CHECKS)})")
    args.out.mkdir(parents=True, exist_ok=True)
    summary, failed = {}, False
    for name in names:
        t0 = time.monotonic()
        try:
            line, ok = CHECKS[name](args.out), True
        except CheckFailed as e:
            line, ok = f"FAILED: {e}", False
        except Exception:               # a fault of the check itself: its trace, then on
            line, ok = "ERROR: " + traceback.format_exc(limit=6).replace("\n", " | "), False
        failed |= not ok
        summary[name] = {"ok": ok, "line": line, "seconds": round(time.monotonic() - t0, 1)}
        print(f"{name}: {line} ({summary[name]['seconds']}s)", flush=True)
    _write(args.out / "summary.json", {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                           time.gmtime()), "checks": summary})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
