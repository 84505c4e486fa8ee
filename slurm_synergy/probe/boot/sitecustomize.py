"""Python imports this at start-up in every process that has its folder first on
PYTHONPATH (the probe's supervisor puts it there, or the node's TaskProlog): it installs
the probe's hooks, then runs the sitecustomize it shadows, if there is one.

Any interpreter may run it, the user's own included, so it parses on old ones and never
fails: an interpreter older than the hooks need, or a fault in them, leaves the process
unprobed with one line on its standard error, and the shadowed sitecustomize still runs.
"""

import os
import sys

MIN_PYTHON = (3, 8)
_here = os.path.dirname(os.path.abspath(__file__))


def _probe():
    if sys.version_info[:2] < MIN_PYTHON:
        if os.environ.get("SYNERGY_TASK_PYTHON"):
            sys.stderr.write("slurm-synergy probe: Python %d.%d is older than the probe needs "
                             "(%d.%d); this process runs unwatched\n"
                             % (sys.version_info[:2] + MIN_PYTHON))
        return
    try:
        from slurm_synergy.probe import patches
    except ImportError:     # a Python without the package installed: it sits three folders up
        sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(_here))))
        try:
            from slurm_synergy.probe import patches
        finally:
            sys.path.pop()
    patches.install()


def _shadowed():
    if sys.version_info[0] < 3:
        return
    import importlib.machinery
    import importlib.util
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and spec.origin != __file__:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    _probe()
except Exception as e:      # the user's process must start whatever our hooks do
    sys.stderr.write("slurm-synergy probe: not watching this process: %s: %s\n"
                     % (type(e).__name__, e))
_shadowed()
