"""``python -m kvtier``: the same as the ``kvtier`` command."""

import sys

from kvtier.cli.main import main

sys.exit(main())
