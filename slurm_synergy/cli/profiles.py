"""`synergy profiles`: the stored profiles as a table, JSON or a plot."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub) -> None:
    """`profiles [FINGERPRINTS] [--store] [--json] [--plot] [--zeus-trace] [--forget]`."""
    p = sub.add_parser("profiles", help="the stored profiles: table, JSON, plot")
    p.add_argument("fingerprints", nargs="*", help="only these (default: all)")
    p.add_argument("--store", type=Path, help="profile store (default: SYNERGY_PROFILES "
                   "or ~/.slurm-synergy/profiles)")
    p.add_argument("--json", action="store_true", help="print the profiles as JSON")
    p.add_argument("--plot", type=Path, help="write throughput against cores to this PNG")
    p.add_argument("--zeus-trace", type=Path, metavar="FILE", help="write one profile's "
                   "power sweep as a trace in Zeus's format, for `synergy hetero --trace`")
    p.add_argument("--forget", action="store_true", help="drop the holds of FINGERPRINTS "
                   "(workloads whose marked run measured nothing): their next job is "
                   "measured again, once the table is synced")
    p.set_defaults(func=run)


def _holds_text(store) -> str:
    """The workloads held from measuring, with why, for the end of the table; "" if none."""
    from slurm_synergy.fileio import shown
    from slurm_synergy.profiles import HOLD_S

    holds = store.holds()
    if not holds:
        return ""
    lines = [f"not measured (their jobs keep what they ask and are not marked for measuring "
             f"for {HOLD_S / 86400:.0f} days; --forget FINGERPRINT measures the next one):"]
    for fp, record in holds:
        lines.append(f"  {fp}  " + (f"job {shown(record.job_id, 20)} at {shown(record.at, 40)}: "
                                    f"{shown(record.why, 300)}" if record else
                                    "(its record is unreadable)"))
    return "\n".join(lines)


def _write_trace(profiles, path: Path) -> int:
    import json

    from slurm_synergy.hetero.traces import zeus_trace
    if len(profiles) != 1:
        print(f"synergy: error: --zeus-trace takes one profile, not {len(profiles)}",
              file=sys.stderr)
        return 1
    p = profiles[0]
    trace = zeus_trace(p.batch, [(pt.limit_w, pt.samples_per_s, pt.avg_power_w)
                                 for pt in p.gpu.power_sweep])
    path.write_text(json.dumps(trace, indent=1) + "\n")
    print(f"{path}: {p.gpu.name or 'GPU'} at batch {p.batch}, "
          f"{len(trace[str(p.batch)])} power limit(s)")
    return 0


def run(args: argparse.Namespace) -> int:
    """The stored profiles as a table or JSON (a plot, Zeus's trace where asked); a bad
    file is named and skipped, and exits 1 only where it was asked for by name."""
    from slurm_synergy.model.errors import SynergyError
    from slurm_synergy.model.profile import ProfileError
    from slurm_synergy.profiles import ProfileStore
    from slurm_synergy.profile_table import plot, profiles_table

    store = ProfileStore.named(args.store) if args.store else ProfileStore.default()
    if args.forget:
        if not args.fingerprints:
            raise SynergyError("--forget takes the fingerprints of the holds to drop")
        missing = 0
        for fp in args.fingerprints:
            try:
                gone = store.forget(fp)
            except ProfileError as exc:
                gone = False
                print(f"synergy: error: {exc}", file=sys.stderr)
            missing += not gone
            print(f"{fp}: " + ("hold dropped: its next job is measured" if gone else
                               f"no hold in {store.root}"))
        return 1 if missing else 0
    fps = args.fingerprints or store.fingerprints()
    profiles, broken = [], 0
    for fp in fps:
        # One bad file is named and skipped, as `plugin sync` does; it fails the command
        # only when the user asked for that profile.
        try:
            profiles.append(store.load(fp))
        except ProfileError as exc:
            broken += 1
            print(f"synergy: skipped: {exc}", file=sys.stderr)
    if args.zeus_trace:
        return _write_trace(profiles, args.zeus_trace) if not broken else 1
    if args.json:
        print("[" + ",\n".join(p.to_json().rstrip() for p in profiles) + "]")
    else:
        print(profiles_table(profiles) if profiles else f"no profiles in {store.root}")
        held = "" if args.fingerprints else _holds_text(store)
        if held:
            print(held)
    if args.plot and profiles:
        print(f"plot: {plot(profiles, args.plot)}", file=sys.stderr)
    return 1 if broken and args.fingerprints else 0
