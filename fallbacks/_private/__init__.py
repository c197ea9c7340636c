"""Internals of the fallbacks package; not a public API."""
