"""The plugin: the decision engine, its table, the job_submit shim's install, user mode,
and resubmission after profiling."""
