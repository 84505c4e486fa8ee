"""The decision table slurmctld's plugin reads, its sync from the profile stores, and
the one place a decision is made and applied to a workload's jobs."""
