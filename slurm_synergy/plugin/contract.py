"""The shim's contract with the Python that owns it, rendered into etc/job_submit.lua.

The shim runs inside slurmctld, in Lua, and shares with the Python its marks, its table's
name, format and bounds, the plain-script key's constants and the environment a job must
not inherit. Each is defined once in Python (model/comment.py, model/plainkey.py,
decisions/table.py, environment.py); `rendered` writes them into the shim's CONTRACT block
at install (plugin/install.py), as slurm.conf is rendered from its template, and the
checked-in file carries the same block (tests/unit/test_plugin_contract.py), so the Lua
read on its own says the same."""

from __future__ import annotations

from slurm_synergy.decisions import table
from slurm_synergy.environment import INHERITED
from slurm_synergy.model import comment, plainkey
from slurm_synergy.model.errors import SynergyError

BEGIN = "-- BEGIN CONTRACT (rendered from Python at install: slurm_synergy/plugin/contract.py)"
END = "-- END CONTRACT"


def _lua(value: object) -> str:
    """A Python constant as a Lua literal: a string, a whole number, or a table of them."""
    if isinstance(value, str):
        if any(c in value for c in '"\\\n'):
            raise ValueError(f"{value!r} needs escaping in Lua")
        return f'"{value}"'
    if isinstance(value, bool) or not isinstance(value, (int, tuple, dict)):
        raise TypeError(f"no Lua literal for {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_lua(v)}" for k, v in value.items()) + " }"
    return "{ " + ", ".join(_lua(v) for v in value) + " }"


def constants() -> dict[str, object]:
    """Each constant the shim takes from Python, by its Lua name."""
    return {
        "TABLE_NAME": table.TABLE_NAME,
        "TABLE_MAGIC": table.MAGIC,
        "TABLE_FORMAT": table.FORMAT,
        "MAX_BYTES": table.MAX_BYTES,
        "MAX_ENTRIES": table.MAX_ENTRIES,
        # Whatever the table's header claims, no decision goes beyond these.
        "HARD": {"cpus": table.MAX_CPUS, "mem_mb": table.MAX_MEM_MB, "gpus": table.MAX_GPUS,
                 "workers": table.MAX_WORKERS, "power_w": table.MAX_POWER_W,
                 "procs": table.MAX_PROCS},
        "FINGERPRINT_PREFIX": comment.PREFIX,
        "FINGERPRINT_HEX": comment.FINGERPRINT_HEX,
        "OPT_OUT": comment.OPT_OUT,
        "HETERO": comment.HETERO,
        "KEY_VERSION": plainkey.KEY_VERSION,
        "KEY_BUDGET": plainkey.KEY_BUDGET,
        "KEY_MODULI": plainkey.MODULI,
        # What a job submitted from inside one of ours inherits and is not its own.
        "INHERITED": INHERITED,
    }


def _line(name: str, value: object) -> str:
    """One `local NAME = value`, a long list of strings wrapped one item a line."""
    line = f"local {name} = {_lua(value)}"
    if len(line) <= 100 or not isinstance(value, tuple):
        return line
    return f"local {name} = {{\n" + "".join(f"\t{_lua(v)},\n" for v in value) + "}"


def block() -> str:
    """The CONTRACT block, its markers included."""
    body = "\n".join(_line(name, value) for name, value in constants().items())
    return f"{BEGIN}\n{body}\n{END}"


def rendered(shim: str) -> str:
    """The shim's text with its CONTRACT block written from Python; SynergyError where
    the text has no such block (not this product's shim)."""
    start, end = shim.find(BEGIN), shim.find(END)
    if start < 0 or end < start:
        raise SynergyError("job_submit.lua has no CONTRACT block: not slurm-synergy's shim")
    return shim[:start] + block() + shim[end + len(END):]
