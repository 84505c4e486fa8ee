"""python -m slurm_synergy.probe [options] -- COMMAND...: see the package's docstring."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from slurm_synergy.argtypes import int_at_least, positive_float
from slurm_synergy.probe.records import MODES, ProbeConfig
from slurm_synergy.probe.supervise import Start, run, watch_exit

PROG = "probe"
USAGE_EXIT = 2
FAILED_EXIT = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Exit with USAGE_EXIT and one line naming the bad option."""
        self.exit(USAGE_EXIT, f"{PROG}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The probe's command line."""
    p = _Parser(prog=f"python -m slurm_synergy.{PROG}",
                description="Measure an unmodified training script from the inside: "
                "samples/s, the share of each step spent waiting on the data loader, peak "
                "memory; per process and for the run.",
                epilog="Exit status: 0 measured (watch mode: the command's own status), "
                "1 nothing measured (the reason is in --out and on stderr), 2 bad options.")
    add = p.add_argument
    add("--mode", choices=MODES, default="train",
        help="train: end to end; loader: the script's loader alone; compute: its first "
        "batch replayed, no loader; watch: the real run, recorded, never stopped "
        "(default %(default)s)")
    add("--workers", type=int_at_least(0), help="set every DataLoader's num_workers (and DALI's "
        "num_threads) to this, whatever the script asks")
    add("--warmup", type=int_at_least(0), default=3, help="batches left out first (default "
        "%(default)s)")
    add("--iterations", type=int_at_least(1), default=20,
        help="measured steps, then the script is ended cleanly (default %(default)s)")
    add("--peak", type=positive_float, metavar="SECONDS",
        help="train mode: after the measured steps, let the script train on this long "
        "while its memory is read ten times a second (default: end it at once)")
    add("--time-limit", type=positive_float, default=120.0,
        help="seconds the script may take to its first batch (default %(default)s)")
    add("--interval", type=positive_float, default=30.0,
        help="watch mode: seconds between the processes' record writes (default "
        "%(default)s)")
    add("--no-sync", action="store_true",
        help="do not synchronise CUDA at each batch (the wait then absorbs queued work)")
    add("--out", type=Path, default=Path("probe.json"),
        help="the result file, written whole (default %(default)s)")
    add("command", nargs=argparse.REMAINDER,
        help="-- then SCRIPT.py [args], or a launcher: torchrun ... SCRIPT.py [args]")
    return p


def main(argv: Sequence[str] | None = None, start: Start | None = None) -> int:
    """Probe the command `argv` names and print what was measured; returns the exit status
    (0 measured, 1 nothing measured, 2 bad options; watch mode: the command's own)."""
    args = build_parser().parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print(f"{PROG}: error: no command to probe (-- SCRIPT.py [args])", file=sys.stderr)
        return USAGE_EXIT
    if command[0].endswith(".py") and not Path(command[0]).is_file():
        print(f"{PROG}: error: {command[0]}: no such script", file=sys.stderr)
        return USAGE_EXIT
    config = ProbeConfig(mode=args.mode, workers=args.workers, warmup=args.warmup,
                         iterations=args.iterations, interval_s=args.interval,
                         sync_cuda=not args.no_sync, peak_s=args.peak or 0.0)
    try:
        result = run(config, command, args.out.resolve(), args.time_limit, start)
    except OSError as e:
        print(f"{PROG}: error: {command[0]}: {e}", file=sys.stderr)
        return USAGE_EXIT if args.mode != "watch" else 127
    m = result.measurement
    if m is not None:
        print(f"{PROG}: {result.script}: {m.samples_per_s:.1f} samples/s over {m.steps} "
              f"steps, {m.data_wait_share:.0%} of each step waiting on data, "
              f"{m.processes} process(es); {args.out}", file=sys.stderr)
    if result.reason:
        print(f"{PROG}: error: {result.reason}", file=sys.stderr)
    if args.mode == "watch":
        return watch_exit(result)
    return 0 if result.ok else FAILED_EXIT


if __name__ == "__main__":
    sys.exit(main())
