"""`python -m bertforge ...`, and so `torchrun ... -m bertforge ...`: the `bertforge` command."""

import sys

from .cli import main

sys.exit(main())
