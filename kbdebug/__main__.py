"""`python -m kbdebug` runs the command line."""

import sys

from kbdebug.cli import main

sys.exit(main())
