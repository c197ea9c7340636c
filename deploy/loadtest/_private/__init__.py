"""Internals of the load-test tool; import from ``deploy.loadtest`` instead."""
