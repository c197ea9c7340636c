"""Internals of the alerting package; not a public API."""
