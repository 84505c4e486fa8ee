"""Profiling a workload inside its allocation (profiler/offline_profiler.py is its
Synergy-shaped entry): the checked plan, the measured steps, the sweeps, the read rates
for the memory model, and the store's lock."""
