"""The ``trl-grpo-ext`` command line: the dispatcher (``main``) and the ``plan``, ``train`` and ``eval`` commands.
"""
