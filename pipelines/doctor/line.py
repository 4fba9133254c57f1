"""What doctor reports: one `Line` per check, `ok: ...` or `error: <what>: <the fix>`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Line:
    ok: bool
    text: str  # ok: what holds; error: "<what>: <the fix>"
    warning: bool = False

    def render(self) -> str:
        return f"{'warning' if self.warning else 'ok' if self.ok else 'error'}: {self.text}"
