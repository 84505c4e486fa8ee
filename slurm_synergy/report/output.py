"""The report's per-job rows as a terminal table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from typing import Sequence

from ..columns import aligned
from .jobs import JobRow


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table(rows: Sequence[JobRow]) -> str:
    head = ["JobID", "Name", "State", "Elapsed", "CPUs", "GPUs", "GPU energy", "kWh",
            "GPU util%", "SM%", "GPU mem MB", "Limit W", "Note"]
    body = [[r.job_id, r.name[:24], r.state, r.elapsed, str(r.cpus), str(r.gpus),
             "-" if r.gpu_energy_j is None else f"{r.gpu_energy_j / 1000:.1f} kJ",
             _num(r.gpu_energy_kwh, ".4f"), _num(r.gpu_util_pct, ".0f"),
             _num(r.gpu_sm_active_pct, ".0f"), _num(r.gpu_mem_peak_mb, ".0f"),
             _num(r.gpu_power_limit_w, ".0f"), r.gpu_note] for r in rows]
    return aligned(head, body, rule=True)


def records(rows: Sequence[JobRow]) -> list[dict[str, object]]:
    return [{**asdict(r), "gpu_energy_kwh": r.gpu_energy_kwh} for r in rows]


def as_csv(rows: Sequence[JobRow]) -> str:
    recs = records(rows)
    if not recs:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(recs[0]))
    writer.writeheader()
    writer.writerows(recs)
    return buf.getvalue()


def as_json(rows: Sequence[JobRow]) -> str:
    return json.dumps(records(rows), indent=1)
