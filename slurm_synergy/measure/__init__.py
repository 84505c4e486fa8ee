"""Measuring a workload inside its own allocation, two ways that share the halving search
and its plateau (search.py), the workload's lock (lock.py) and their exit codes
(errors.py):

- inrun/: the job trains to its end while its cores are narrowed for a few seconds at a
  time (supervisor.py, windows.py), its memory followed after (follow.py); attach.py is
  the same beside a plain script's Python that the TaskProlog reached.
- offline/: the profiler's own steps before the job trains (profiler/offline_profiler.py
  is its Synergy-shaped entry): the checked plan, the measured steps, the sweeps, the
  read rates for the memory model, the GPU's room."""
