"""``python -m pytest_attn.capture OUT.json script.py [args]``."""

from __future__ import annotations

import sys

from .command import main

sys.exit(main())
