"""A stand-in for nvidia-ml-py's pynvml, for tests on machines without a GPU.

It implements only the calls slurm_synergy.gpu.nvml makes, against GPUs described in the
JSON file named by FAKE_NVML_STATE; limits it accepts are written back to that file, so
a test can see what a prolog or epilog in another process (or in slurmd) did. Per GPU:
uuid, pci, name, minor, limit_mw, min_mw, max_mw, default_mw, energy_mj (null: no
counter), power_mw, util, mem_used_mb, mem_total_mb (24576 unless given), refuse (limits
are refused), and at the top level init_error (nvmlInit raises NVMLError_<init_error>,
e.g. DriverNotLoaded), gpm (the GPU has GPM; sm_active is then its SM activity). A job
"uses" energy by writing millijoules to <state>.energy<minor>, which the counter adds, so
no job rewrites the shared file.
"""

import fcntl
import json
import os
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_Unknown(NVMLError):
    pass


NVML_SUCCESS = 0
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_METRIC_SM_UTIL = 2


def _path():
    return os.environ["FAKE_NVML_STATE"]


def _state():
    with open(_path()) as fh:
        return json.load(fh)


def _gpu(handle):
    return _state()["gpus"][handle]


def nvmlInit():
    error = _state().get("init_error")
    if error:
        raise globals()[f"NVMLError_{error}"](error)


def nvmlDeviceGetCount():
    return len(_state()["gpus"])


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetMinorNumber(h):
    return _gpu(h)["minor"]


def nvmlDeviceGetUUID(h):
    return _gpu(h)["uuid"]


def nvmlDeviceGetPciInfo(h):
    return SimpleNamespace(busId=_gpu(h)["pci"].encode())


def nvmlDeviceGetName(h):
    return _gpu(h)["name"]


def nvmlGpmQueryDeviceSupport(h):
    return SimpleNamespace(isSupportedDevice=int(bool(_gpu(h).get("gpm"))))


def nvmlGpmSampleAlloc():
    return SimpleNamespace(handle=None)


def nvmlGpmSampleGet(h, sample):
    sample.handle = h
    return sample


def nvmlGpmSampleFree(sample):
    sample.handle = "freed"


class c_nvmlGpmMetricsGet_t:
    def __init__(self):
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0)]


def nvmlGpmMetricsGet(query):
    if "freed" in (query.sample1.handle, query.sample2.handle):
        raise NVMLError("Invalid Argument: a freed sample")
    query.metrics[0].value = float(_gpu(query.sample2.handle)["sm_active"])
    return query


def nvmlDeviceGetPowerManagementLimit(h):
    return _gpu(h)["limit_mw"]


def nvmlDeviceGetPowerManagementLimitConstraints(h):
    g = _gpu(h)
    return [g["min_mw"], g["max_mw"]]


def nvmlDeviceGetPowerManagementDefaultLimit(h):
    return _gpu(h)["default_mw"]


def nvmlDeviceSetPowerManagementLimit(h, mw):
    # Prologs and epilogs of different jobs run at once: one writer at a time.
    with open(_path() + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = _state()
        g = state["gpus"][h]
        if g.get("refuse"):
            raise NVMLError("Insufficient Permissions")
        if not g["min_mw"] <= mw <= g["max_mw"]:
            raise NVMLError("Invalid Argument")
        g["limit_mw"] = mw
        tmp = _path() + f".{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(state, fh)
        os.replace(tmp, _path())


def nvmlDeviceGetTotalEnergyConsumption(h):
    g = _gpu(h)
    if g["energy_mj"] is None:
        raise NVMLError("Not Supported")
    try:
        with open(_path() + f".energy{g['minor']}") as fh:
            return g["energy_mj"] + int(fh.read())
    except FileNotFoundError:
        return g["energy_mj"]


def nvmlDeviceGetUtilizationRates(h):
    return SimpleNamespace(gpu=_gpu(h)["util"], memory=0)


def nvmlDeviceGetMemoryInfo(h):
    gpu = _gpu(h)
    return SimpleNamespace(used=gpu["mem_used_mb"] * 2**20,
                           total=gpu.get("mem_total_mb", 24576) * 2**20)


def nvmlDeviceGetPowerUsage(h):
    return _gpu(h)["power_mw"]
