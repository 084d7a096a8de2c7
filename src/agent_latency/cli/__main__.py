"""``python -m agent_latency.cli``: the same as the ``agent-latency`` command."""

import sys

from agent_latency.cli import main

sys.exit(main())
