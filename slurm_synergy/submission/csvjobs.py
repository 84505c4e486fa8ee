"""Read a job list (CSV) into job specs, validating every row before anything runs.

Both torchloader's dl_submit.conf.csv columns and the project's own work. Every
problem is collected, each naming file, row, column and what is wrong, and the whole
file is refused if any row is bad.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from slurm_synergy.hetero.rows import plan_cell
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.jobspec import (BUILTIN_ARCHS, BUILTIN_SCRIPT, LAUNCHES, LOADERS,
                                         SYNTHETIC_DATASET, HetPart, JobSpec, RowRef)
from slurm_synergy.model.policy import ON_PROFILED
from slurm_synergy.model.options import SPELLINGS, declared_options, spelling, spellings
from slurm_synergy.model.units import mem_mb

TORCHLOADER_COLUMNS = ("arch", "depth", "batch", "workers", "output_folder", "port",
                       "submit_interval", "cuda_device")
PROJECT_COLUMNS = ("name", "script", "dataset", "gpus", "gpu_type", "cpus", "mem", "time",
                   "partition", "iterations", "epochs", "loader", "args", "launcher", "nproc",
                   "watch", "hetero", "on_profiled")
COLUMNS = TORCHLOADER_COLUMNS + PROJECT_COLUMNS
# Without a script column every row runs the built-in trainer, which needs these.
REQUIRED = ("arch", "batch")
# Columns that become a user's script's options, when it declares one (probe.options).
SCRIPT_OPTION_COLUMNS = {"arch": "arch", "depth": "depth", "batch": "batch",
                         "workers": "workers", "iterations": "iterations", "epochs": "epochs",
                         "port": "port", "dataset": "data", "loader": "loader"}
BOOLEANS = {"yes": True, "true": True, "1": True, "on": True,
            "no": False, "false": False, "0": False, "off": False}

DEFAULT_WORKERS = 1
DEFAULT_TIME = "01:00:00"
# Starting guesses only: the plugin right-sizes a workload once it has been profiled.
BASE_MEM_MB = 2048
MEM_PER_WORKER_MB = 1024

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
TOKEN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ARCH_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$")
FOLDER_RE = re.compile(r"^[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*$")
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
TIME_RE = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}(:\d{1,2})?)?)$")
MAX_INTERVAL_S = 7 * 24 * 3600


class CsvError(SynergyError):
    """A job list that cannot be submitted; `problems` holds one line per problem."""

    def __init__(self, path: Path, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: {len(problems)} problem(s), nothing submitted:\n  "
                         + "\n  ".join(problems))


@dataclass
class _Row:
    ref: RowRef
    cells: dict[str, str]
    problems: list[str]

    def bad(self, column: str, message: str) -> None:
        """Note a problem with the row's `column`."""
        self.problems.append(f"{self.ref}, column {column}: {message}")

    def get(self, column: str) -> str:
        """The cell of `column`, stripped; "" where the row has none."""
        return self.cells.get(column, "").strip()

    def integer(self, column: str, low: int, high: int, default: int | None = None) -> int | None:
        """The cell as an integer within `low`..`high`; `default` where it is empty, or is not
        one (the problem noted)."""
        text = self.get(column)
        if not text:
            return default
        try:
            value = int(text)
        except ValueError:
            self.bad(column, f"{text!r} is not an integer")
            return default
        if not low <= value <= high:
            self.bad(column, f"{value} is out of range {low}..{high}")
            return default
        return value

    def matching(self, column: str, pattern: re.Pattern[str], what: str) -> str:
        """The cell where it matches `pattern`; "" where it does not (the problem noted)."""
        text = self.get(column)
        if text and not pattern.match(text):
            self.bad(column, f"{text!r} is not {what}")
            return ""
        return text


def load_jobs(path: Path) -> list[JobSpec]:
    """Parse and validate a job list; raises CsvError listing every problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise CsvError(path, [f"{path}: no such file"]) from None
    except (UnicodeDecodeError, IsADirectoryError) as exc:
        raise CsvError(path, [f"{path}: not a UTF-8 text file ({exc.__class__.__name__})"]) from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise CsvError(path, [f"{path}: the file is empty; it needs a header line and rows"])
    header_problems = _check_header(path, lines[0])
    if header_problems:
        raise CsvError(path, header_problems)

    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = [h.strip().lower() for h in next(reader)]
    rows: list[_Row] = []
    problems: list[str] = []
    for number, cells in enumerate(reader, start=1):
        if not any(c.strip() for c in cells):
            continue
        ref = RowRef(str(path), number, reader.line_num)
        if len(cells) != len(header):
            problems.append(f"{ref}: {len(cells)} cells but the header has {len(header)} columns")
            continue
        rows.append(_Row(ref, dict(zip(header, cells)), problems))
    if not rows and not problems:
        raise CsvError(path, [f"{path}: the header is there but no job rows follow"])

    specs = [spec for row in rows if (spec := _spec(row, path.parent)) is not None]
    _check_unique_names(specs, problems)
    if problems:
        raise CsvError(path, problems)
    return specs


def _check_header(path: Path, first_line: str) -> list[str]:
    if "," not in first_line:
        for sep, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "bars")):
            if sep in first_line:
                return [f"{path} line 1: the header is separated by {name}; job lists are "
                        "comma-separated (columns: " + ", ".join(COLUMNS) + ")"]
    header = [h.strip().lower() for h in next(csv.reader([first_line], skipinitialspace=True))]
    problems = []
    seen: set[str] = set()
    for col in header:
        if col in seen:
            problems.append(f"{path} line 1: column {col!r} appears twice")
        seen.add(col)
        if col not in COLUMNS:
            near = difflib.get_close_matches(col, COLUMNS, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known columns: {', '.join(COLUMNS)}"
            problems.append(f"{path} line 1: unknown column {col!r}{hint}")
    for col in REQUIRED:
        if col not in header and "script" not in header:
            problems.append(f"{path} line 1: missing required column {col!r} (or a script "
                            "column naming each row's training script)")
    return problems


def _spec(row: _Row, base: Path) -> JobSpec | None:
    before = len(row.problems)
    script = _script(row, base)
    builtin = script == BUILTIN_SCRIPT

    arch = row.matching("arch", ARCH_RE, "a model name (a letter, then letters, digits, _ . -)")
    if builtin and not row.get("arch"):
        row.bad("arch", "is empty; it names the built-in trainer's model")
    elif builtin and arch and arch not in BUILTIN_ARCHS:
        near = difflib.get_close_matches(arch, BUILTIN_ARCHS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        row.bad("arch", f"{arch!r} is not a built-in model ({', '.join(BUILTIN_ARCHS)}){hint}")
    depth = row.integer("depth", 1, 1000)
    if builtin and depth is not None and arch and arch != "resnet":
        row.bad("depth", f"the built-in {arch} has a fixed depth; leave depth empty")
    batch = row.integer("batch", 1, 65536)
    if builtin and batch is None and not row.get("batch"):
        row.bad("batch", "is empty; the built-in trainer needs the batch size")
    workers = row.integer("workers", 0, 256, DEFAULT_WORKERS)
    gpus = _gpus(row)
    gpu_type = row.matching("gpu_type", TOKEN_RE, "a GPU type (letters, digits, _ . -)")
    cpus = row.integer("cpus", 1, 4096, (workers or 0) + 1)
    mem_mb = _mem(row, workers or 0)
    time = row.matching("time", TIME_RE, "a Slurm time limit (M, H:M:S, D-H:M:S ...)") \
        or DEFAULT_TIME
    partition = row.matching("partition", TOKEN_RE, "a partition name")
    iterations = row.integer("iterations", 1, 10**9)
    epochs = row.integer("epochs", 1, 10**6)
    if iterations is not None and epochs is not None:
        row.bad("epochs", "give iterations or epochs, not both")
    loader = row.get("loader").lower() or "pytorch"
    if loader not in LOADERS:
        row.bad("loader", f"{loader!r} is not a data loader ({', '.join(LOADERS)})")
    args = _args(row)
    port = row.integer("port", 1024, 65535)
    interval = _interval(row)
    dataset = _dataset(row, base, builtin)
    launch = row.get("launcher").lower() or "python"
    if launch not in LAUNCHES:
        row.bad("launcher", f"{launch!r} is not a launcher ({', '.join(LAUNCHES)})")
    procs = row.integer("nproc", 1, 256, 1) or 1
    if procs > 1 and launch != "torchrun":
        row.bad("nproc", f"{procs} processes need launcher torchrun")
    if launch == "torchrun" and (builtin or not script.endswith(".py")):
        row.bad("launcher", "torchrun runs a user's Python script (a .py in the script column)")
    watch = _boolean(row, "watch")
    on_profiled = row.get("on_profiled").lower() or None
    if on_profiled is not None and on_profiled not in ON_PROFILED:
        row.bad("on_profiled", f"{on_profiled!r} is not one of {', '.join(ON_PROFILED)}")
    hetero = _hetero(row, base, script, batch)
    options: tuple[str, ...] = ()
    workers_options: tuple[str, ...] = ()
    if not builtin:
        if dataset == SYNTHETIC_DATASET:
            row.bad("dataset", f"{SYNTHETIC_DATASET!r} is the built-in trainer's generated "
                    "set; give your script's data folder")
        values = {"arch": arch, "depth": depth, "batch": batch, "workers": workers,
                  "iterations": iterations, "epochs": epochs, "port": port,
                  "dataset": dataset, "loader": row.get("loader")}
        options, workers_options = _script_options(row, script, values)
    name = row.matching("name", NAME_RE, "a job name (letters, digits, _ . -, at most 64)")
    if not name and not row.get("name"):
        stem = arch or re.sub(r"[^A-Za-z0-9_.-]", "_", Path(script).stem)[:40] or "job"
        size = f"-b{batch}" if batch is not None else ""
        name = f"{stem}{depth if depth is not None else ''}{size}-w{workers}-r{row.ref.row}"
    output_folder = row.get("output_folder")
    if output_folder and (not FOLDER_RE.match(output_folder)
                          or ".." in output_folder.split("/")):
        row.bad("output_folder", f"{output_folder!r} is not a relative folder name "
                "(letters, digits, _ . + -, separated by /, no ..)")
    if len(row.problems) > before:
        return None
    digest = hashlib.sha256(repr(sorted(row.cells.items())).encode()).hexdigest()[:16]
    return JobSpec(
        name=name, script=script, arch=arch, depth=depth, batch=batch or 1,
        workers=workers or 0, dataset=dataset,
        gpus=sum(p.gpus for p in hetero) if hetero else gpus, gpu_type=gpu_type,
        cpus=cpus or 1, mem_mb=mem_mb, time=time, partition=partition,
        iterations=iterations, epochs=epochs, loader=loader, args=args,
        output_folder=output_folder or "", port=port, submit_interval_s=interval,
        source=row.ref, row_digest=digest,
        pinned=tuple(c for c in ("cpus", "mem", "gpus") if row.get(c)),
        script_options=options, workers_options=workers_options,
        workers_given=bool(row.get("workers")), launch=launch, procs=procs, watch=watch,
        hetero=hetero, on_profiled=on_profiled)


def _hetero(row: _Row, base: Path, script: str, batch: int | None) -> tuple[HetPart, ...]:
    """A job over two GPU types: its parts, planned from the cell's traces."""
    cell = row.get("hetero")
    if not cell:
        return ()
    for column in ("gpus", "gpu_type", "cuda_device", "nproc"):
        if row.get(column):
            row.bad(column, "a hetero row names its GPUs in the hetero column; leave it empty")
    if row.get("launcher").lower() == "torchrun":
        row.bad("launcher", "a hetero row runs one process per GPU itself; leave it empty")
    if script != BUILTIN_SCRIPT and spelling("batch", declared_options(Path(script))) is None:
        row.bad("hetero", "the script declares no batch-size option to give each type its share")
    if batch is None:
        return ()                # the batch column says why
    parts, problems = plan_cell(cell, batch, base)
    for problem in problems:
        row.bad("hetero", problem)
    return parts


def _script_options(row: _Row, script: str,
                    values: Mapping[str, object]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The options a user's script gets from its row: a column it sets becomes an option
    only when the script declares one (its own spelling); a column it cannot take is an
    error, except workers, which the probe sets for a script without the option."""
    declared = declared_options(Path(script))
    argv: list[str] = []
    for column, option in SCRIPT_OPTION_COLUMNS.items():
        if not row.get(column) or values[column] in (None, ""):
            continue
        flag = spelling(option, declared)
        if flag is not None:
            argv += [flag, str(values[column])]
        elif column != "workers":
            row.bad(column, f"{Path(script).name} declares no {'/'.join(SPELLINGS[option])} "
                    "option to take it; leave the column empty and put the value in args "
                    "as the script expects it")
    return tuple(argv), tuple(spellings("workers", declared))


def _boolean(row: _Row, column: str) -> bool | None:
    text = row.get(column).lower()
    if not text:
        return None
    if text not in BOOLEANS:
        row.bad(column, f"{text!r} is not yes or no")
        return None
    return BOOLEANS[text]


def _script(row: _Row, base: Path) -> str:
    text = row.get("script")
    if not text:
        return BUILTIN_SCRIPT
    found = _existing(text, base, Path.is_file)
    if found is None:
        row.bad("script", f"{text!r}: no such file (looked beside the CSV and in the "
                "current folder)")
        return BUILTIN_SCRIPT
    if found.suffix != ".py" and not os.access(found, os.X_OK):
        row.bad("script", f"{text!r} is neither a .py file nor executable (chmod +x it)")
    return str(found)


def _dataset(row: _Row, base: Path, builtin: bool) -> str:
    text = row.get("dataset")
    if not text:
        return SYNTHETIC_DATASET if builtin else ""
    if text == SYNTHETIC_DATASET:
        return text
    found = _existing(text, base, Path.is_dir)
    if found is None:
        row.bad("dataset", f"{text!r}: no such folder (use {SYNTHETIC_DATASET!r} for the "
                "generated JPEG set, or a path)")
        return ""
    return str(found)


def _existing(text: str, base: Path, kind: Callable[[Path], bool]) -> Path | None:
    if any(ord(c) < 32 for c in text):
        return None
    candidates = [Path(text)] if Path(text).is_absolute() else [base / text, Path.cwd() / text]
    for candidate in candidates:
        if kind(candidate):
            return candidate.resolve()
    return None


def _gpus(row: _Row) -> int:
    gpus = row.integer("gpus", 0, 64)
    devices = row.get("cuda_device")
    if devices:
        ids = devices.replace(",", " ").split()
        if not all(i.isdigit() for i in ids) or len(set(ids)) != len(ids):
            row.bad("cuda_device", f"{devices!r} is not a list of distinct GPU indices like \"0 1\"")
            return gpus or 0
        if gpus is not None and gpus != len(ids):
            row.bad("gpus", f"{gpus} disagrees with cuda_device {devices!r} ({len(ids)} GPUs)")
        # Slurm picks the devices; the list only says how many.
        return len(ids)
    return 1 if gpus is None else gpus


def _mem(row: _Row, workers: int) -> int:
    text = row.get("mem")
    if not text:
        return BASE_MEM_MB + MEM_PER_WORKER_MB * workers
    size = mem_mb(text)
    if size is None:
        row.bad("mem", f"{text!r} is not a memory size (e.g. 4G, 4096M, 4096)")
        return 0
    mb = int(size)
    if mb < 1:
        row.bad("mem", f"{text!r} is less than 1 MB")
    return mb


def _args(row: _Row) -> tuple[str, ...]:
    text = row.get("args")
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        row.bad("args", f"{text!r} cannot be split into arguments ({exc})")
        return ()


def _interval(row: _Row) -> float:
    text = row.get("submit_interval")
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        row.bad("submit_interval", f"{text!r} is not a number of seconds")
        return 0.0
    if not 0 <= value <= MAX_INTERVAL_S:
        row.bad("submit_interval", f"{value:g} is out of range 0..{MAX_INTERVAL_S} seconds")
        return 0.0
    return value


def _check_unique_names(specs: list[JobSpec], problems: list[str]) -> None:
    first: dict[str, JobSpec] = {}
    for spec in specs:
        if spec.name in first:
            problems.append(f"{spec.source}, column name: {spec.name!r} is already the name of "
                            f"row {first[spec.name].source.row}; job names must be unique")
        else:
            first[spec.name] = spec
