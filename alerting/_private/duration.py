"""Duration parsing for configs: ``30``, ``"30s"``, ``"5m"``, ``"4h"``, ``"1h30m"`` -> seconds."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """Seconds from a number or a Prometheus-style duration string; raises ValueError."""
    if isinstance(value, bool):
        # ValueError, not TypeError: pydantic reports ValueErrors as field errors.
        raise ValueError(f"duration must be a number of seconds or like '5m', got {value!r}")  # noqa: TRY004
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip()
        parts = _PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(
                f"duration must be a number of seconds or like '30s', '5m', '4h', got {value!r}"
            )
        seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    if seconds < 0:
        raise ValueError(f"duration must be >= 0, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
