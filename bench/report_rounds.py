"""Rounds of sacct alone and the whole report, interleaved, with the report code of a given
checkout (another commit's worktree, to set two versions side by side on the same jobs):
bench_report.py --against runs it. Prints one JSON line.

    python bench/report_rounds.py TREE IDS_FILE ROUNDS
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

tree, ids_file, rounds = Path(sys.argv[1]).resolve(), Path(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, str(tree))

from slurm_synergy.report import accounting  # noqa: E402
from slurm_synergy.report.build import build  # noqa: E402
from slurm_synergy.slurm import SEP, Slurm  # noqa: E402

ids = ids_file.read_text().split()
slurm = Slurm()
bare = ["sacct", "--parsable2", "--noheader", f"--delimiter={SEP}",
        "--format=" + ",".join(accounting.FIELDS), "--jobs=" + ",".join(ids), "--allusers"]
build(slurm, ids)                       # the first call reads the cluster's name and shape
sacct_s, build_s = [], []
for _ in range(rounds):
    t = time.perf_counter()
    subprocess.run(bare, stdout=subprocess.DEVNULL, env=slurm.env(), check=True)
    sacct_s.append(time.perf_counter() - t)
    t = time.perf_counter()
    build(slurm, ids)
    build_s.append(time.perf_counter() - t)
ratios = [b / a for a, b in zip(sacct_s, build_s)]
print(json.dumps({"tree": str(tree), "rounds": rounds,
                  "bare_sacct_s": round(statistics.median(sacct_s), 3),
                  "build_s": round(statistics.median(build_s), 3),
                  "build_over_bare_sacct": [round(statistics.median(ratios), 3),
                                            round(min(ratios), 3), round(max(ratios), 3)]}))
