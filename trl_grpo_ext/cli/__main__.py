"""``python -m trl_grpo_ext.cli ...``: the ``trl-grpo-ext`` command."""

import sys

from .main import main

sys.exit(main())
