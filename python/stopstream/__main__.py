"""``python -m stopstream``: the command-line filter."""

import sys

from stopstream._cli import main

sys.exit(main())
