"""The job_submit plugin's install into a cluster's slurm.conf folder."""
