"""`synergy profiles`: the stored profiles as a table, JSON or a plot."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub) -> None:
    """`profiles [FINGERPRINTS] [--store] [--json] [--plot] [--zeus-trace]`."""
    p = sub.add_parser("profiles", help="the stored profiles: table, JSON, plot")
    p.add_argument("fingerprints", nargs="*", help="only these (default: all)")
    p.add_argument("--store", type=Path, help="profile store (default: SYNERGY_PROFILES "
                   "or ~/.slurm-synergy/profiles)")
    p.add_argument("--json", action="store_true", help="print the profiles as JSON")
    p.add_argument("--plot", type=Path, help="write throughput against cores to this PNG")
    p.add_argument("--zeus-trace", type=Path, metavar="FILE", help="write one profile's "
                   "power sweep as a trace in Zeus's format, for `synergy hetero --trace`")
    p.set_defaults(func=run)


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
    from slurm_synergy.model.profile import ProfileError
    from slurm_synergy.profiles import ProfileStore
    from slurm_synergy.profile_table import plot, profiles_table

    store = ProfileStore.named(args.store) if args.store else ProfileStore.default()
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
    if args.plot and profiles:
        print(f"plot: {plot(profiles, args.plot)}", file=sys.stderr)
    return 1 if broken and args.fingerprints else 0
