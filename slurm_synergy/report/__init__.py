"""Reports from accounting: sacct joined with what slurm-synergy knows about each job."""
