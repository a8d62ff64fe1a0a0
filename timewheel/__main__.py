"""``python -m timewheel``: the same as the ``timewheel`` command."""

import sys

from timewheel.cli import main

sys.exit(main())
