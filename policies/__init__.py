"""Pure decisions over immutable snapshots: no I/O, no locks, no Ray, no torch."""

from policies.priority import Priority, parse_priority

__all__ = ["Priority", "parse_priority"]
