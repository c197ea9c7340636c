"""The one home of helpers shared by tests: ports, Redis, clocks, the in-process app, the
error-shape check and the recording worker. Test modules import helpers from here, never from
other test modules or conftest files."""
