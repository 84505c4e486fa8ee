"""The Slurm plugin's Python side (the plugin itself is etc/job_submit.lua): the decision
table and its sync, the shim's install, user mode, and resubmission after profiling. The
decision engine it applies is slurm_synergy.model.engine."""
