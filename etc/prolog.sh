#!/bin/sh
# slurm-synergy node prolog (runs as root in slurmd on every allocation).
# Pass-through until the node-hooks issue lands: it only records that it ran, so the
# wiring is testable. It must exit 0, or Slurm drains the node.
log="${SYNERGY_HOOK_LOG:-$(dirname "$SLURM_CONF")/../log/hooks.log}"
printf '%s prolog job=%s\n' "$(date -u +%FT%TZ)" "$SLURM_JOB_ID" >>"$log" 2>/dev/null
exit 0
