"""`max_steps: -1` / `total_training_steps: -1` (TRL's "no step limit") get a fix that works (issue 22 review): the
old conflict message told the user to use `total_training_steps=-1`, which is itself refused."""

import pytest

from trl_grpo_ext.cli.plan import main as plan_main
from trl_grpo_ext.config.recipe_parse import parse_recipe_args

CASES = {
    # tiny_cpu sets total_training_steps: 200 and total_epochs: 1
    "max_steps -1 next to our stop fields": (["--max_steps", "-1"],
                                             "Remove max_steps: -1 is TRL's 'no step limit', which is what leaving "
                                             "it out means"),
    "total_training_steps -1": (["--total_training_steps", "-1"],
                                "total_training_steps=-1 must be an integer >= 1. Fix: use a positive number of "
                                "optimizer steps; for no step limit (TRL's max_steps: -1) leave it out"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plan_and_recipe_give_a_fix_that_works(case, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    overrides, expected = CASES[case]
    assert plan_main(["--config", "tiny_cpu", *overrides]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert "total_training_steps=-1 in its place" not in err  # the old advice, refused when followed
    with pytest.raises(SystemExit) as refused:
        parse_recipe_args(["--config", "tiny_cpu", *overrides])
    assert refused.value.code == 2
    assert expected in capsys.readouterr().err
