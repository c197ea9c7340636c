"""``python -m deploy.loadtest CONFIG.yaml [--out DIR]`` (same as ``timeshare loadtest``)."""

import sys

from deploy.loadtest.cli import main

sys.exit(main())
