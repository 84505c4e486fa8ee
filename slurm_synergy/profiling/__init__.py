"""The in-run supervisor's former module path, kept for job scripts written before it
moved to measure/inrun/ (2026-12): a job that waited in the queue across an upgrade
still runs `python -m slurm_synergy.profiling.inrun`, and must not fail for it."""
