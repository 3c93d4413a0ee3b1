"""The ``trl-grpo-ext`` command line: the dispatcher (``main``) and the ``plan``, ``train`` and ``eval`` commands.
"""

import argparse


class Once(argparse.Action):
    """Store an option's value, refusing a second one (argparse would keep the last silently): ``--config``."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} is given twice ({getattr(namespace, self.dest)}, {values}). Fix: give one; "
                         "override its keys with --key value.")
        setattr(namespace, self.dest, values)
