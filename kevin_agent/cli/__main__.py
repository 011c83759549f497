"""``python -m kevin_agent.cli``: the command line, as the ``kevin-opt`` script runs it."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
