import sys

from s2studio.cli import main

sys.exit(main())
