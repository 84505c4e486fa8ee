"""Python imports this at start-up in every process the slurm-synergy probe runs (its
folder is first on PYTHONPATH): it installs the probe's hooks, then runs the
sitecustomize it shadows, if there is one."""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
try:
    from slurm_synergy.probe import hooks
except ImportError:     # a Python without the package installed: it sits three folders up
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(_here))))
    from slurm_synergy.probe import hooks
    sys.path.pop()
hooks.install()

_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None and _spec.origin != __file__:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
