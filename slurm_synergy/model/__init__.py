"""The core: job spec, the job comment's format, units, the profile record, the
throughput model, site policy and the decision engine. Pure: it imports nothing else of
the project, and everything else builds on it."""
