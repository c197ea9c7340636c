"""Internals of the result cache; import from ``router.cache`` instead."""
