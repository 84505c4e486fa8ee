"""The jinja2 environment of every template the project writes: job scripts
(templates/), Slurm's files and the node hooks' wrappers (etc/)."""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

import jinja2

from slurm_synergy import paths

CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


@functools.lru_cache(maxsize=None)
def environment(folder: Path = paths.TEMPLATES) -> jinja2.Environment:
    """Templates of shell scripts and Slurm files (templates/, etc/): strict, not HTML-
    escaped, `q` for shell quoting, `oneline` for a file name in a comment line (a newline
    there would start a line the shell runs). Built once per folder: a fresh environment would
    compile a template again for every row."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)),
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["oneline"] = oneline
    return env


def oneline(value: object) -> str:
    """`value` with its control characters written as escapes: it stays on its line."""
    return CONTROL_RE.sub(lambda m: repr(m.group())[1:-1], str(value))
