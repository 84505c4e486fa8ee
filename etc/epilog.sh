#!/bin/sh
# slurm-synergy node epilog (runs as root in slurmd when a job ends).
# Pass-through until the node-hooks issue lands: it only records that it ran, so the
# wiring is testable. It must exit 0, or Slurm drains the node.
log="${SYNERGY_HOOK_LOG:-$(dirname "$SLURM_CONF")/../log/hooks.log}"
printf '%s epilog job=%s\n' "$(date -u +%FT%TZ)" "$SLURM_JOB_ID" >>"$log" 2>/dev/null
exit 0
