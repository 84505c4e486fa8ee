"""Submission: a job list validated, rendered to sbatch scripts and submitted, the
ledger of what became which job, and a profiled job's right-sized resubmission."""
