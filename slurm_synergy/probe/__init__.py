"""The script probe: measure an unmodified training script from the inside.

    python -m slurm_synergy.probe [probe options] -- SCRIPT.py [script args]
    python -m slurm_synergy.probe [probe options] -- torchrun ... SCRIPT.py [script args]

The probe starts the command with a `sitecustomize` of its own first on PYTHONPATH, so
every Python process beneath it (the script, each torchrun or srun rank, a process the
script spawns) runs with small hooks on PyTorch's DataLoader iterators and DALI's PyTorch
iterators (and, for a script that batches by hand, on its optimizers' steps or autograd's
backward pass). They count the batches and samples each process takes, time the wait on the
loader apart from the rest of the step, set the loader's worker count when asked, and end
the script cleanly once the measurement is complete. The script itself is not changed and
declares nothing.

Modules: `records` (what a process and a run measured; the JSON files), `patches` and
`recorder` (inside each process: what goes into PyTorch and DALI, and the measurement),
`supervise` (the parent: starts, bounds and judges the run).
"""
