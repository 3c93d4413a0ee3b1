"""A run whose last checkpoint holds the plan's last step: whether its end wrote its outputs, and the one line the
recipe prints when it resumes such a run (a retry loop's last command exits 0; nothing is trained)."""

from __future__ import annotations

import os

#: What the recipe's end writes last, on the main process (hub.card: the model card): present and newer than the last
#: checkpoint, the run's end wrote everything before it (adapter, metrics, state, run config, evaluation, plot).
CARD_FILE = "README.md"
STATE_FILE = "trainer_state.json"


def outputs_written(output_dir: str | os.PathLike, checkpoint: str | os.PathLike) -> bool:
    """Whether the run's end wrote its outputs after ``checkpoint`` was saved: ``output_dir/README.md`` (the card, the
    last file it writes) is at least as new as ``checkpoint/trainer_state.json``.

    >>> import pathlib, tempfile, time
    >>> run = pathlib.Path(tempfile.mkdtemp()); (run / "checkpoint-4").mkdir()
    >>> _ = (run / "checkpoint-4" / STATE_FILE).write_text("{}")
    >>> outputs_written(run, run / "checkpoint-4")
    False
    >>> _ = (run / CARD_FILE).write_text("card"); outputs_written(run, run / "checkpoint-4")
    True
    """
    card, state = os.path.join(output_dir, CARD_FILE), os.path.join(checkpoint, STATE_FILE)
    return os.path.isfile(card) and (not os.path.isfile(state) or os.path.getmtime(card) >= os.path.getmtime(state))


def complete_line(output_dir: str | os.PathLike, checkpoint: str, step: int, total_steps: int, wrote: bool) -> str:
    """The one line of a resumed complete run.

    >>> complete_line("out", "out/checkpoint-12", 12, 12, wrote=False)
    'The run in out is complete (out/checkpoint-12 holds step 12 of 12): nothing to resume, nothing trained; its outputs are in out.'
    """
    what = ("wrote the outputs its end left out (adapter, metrics, evaluation, card) from it" if wrote else
            f"nothing to resume, nothing trained; its outputs are in {output_dir}")
    return f"The run in {output_dir} is complete ({checkpoint} holds step {step} of {total_steps}): {what}."
