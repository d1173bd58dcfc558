"""`python -m encdec` is the `encdec` command."""

import sys

from encdec.cli import main

sys.exit(main())
