"""The offline profiler's measurement: plan, steps, sweeps, fetch rates, GPU memory and
room, assembled into a profile by run.py."""
