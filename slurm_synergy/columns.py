"""Plain text tables for the terminal: columns padded to their widest cell."""

from __future__ import annotations

from typing import Sequence


def aligned(head: Sequence[str], rows: Sequence[Sequence[str]], rule: bool = False) -> str:
    """`head` and `rows` in aligned columns, a line of dashes under the head if `rule`."""
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    lines = [list(head)] + ([["-" * w for w in widths]] if rule else []) + [list(r) for r in rows]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip()
                     for line in lines)
