"""Entry point of the bundled app: the same dispatcher as the `s2studio` console script."""

import sys

from s2studio.cli import main

sys.exit(main())
