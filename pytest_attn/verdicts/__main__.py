"""``python -m pytest_attn.verdicts merge ...``: the ``pytest-attn`` command without its entry point (a
checkout on the path, not installed)."""

import sys

from .cli import main

sys.exit(main())
