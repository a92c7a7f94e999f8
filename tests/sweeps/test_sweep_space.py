"""Search spaces: factories, validation for an algorithm, grids and JSON round trips."""

from __future__ import annotations

import pytest

from airflow_elastic.sweeps import choice, loguniform, randint, uniform
from airflow_elastic.sweeps.space import (
    Choice,
    RandInt,
    Uniform,
    contains,
    from_json,
    grid,
    grid_size,
    to_json,
    validate_space,
)
from airflow_elastic.training.spec import SpecError

SPACE = {"lr": loguniform(1e-4, 1e-1), "hidden": choice([32, 64, 128]), "dropout": uniform(0.0, 0.5)}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: uniform(1.0, 1.0), "low < high"),
        (lambda: uniform(0, float("inf")), "finite numbers"),
        (lambda: loguniform(0.0, 1.0), "low > 0"),
        (lambda: randint(3, 2), "low <= high"),
        (lambda: randint(1.5, 2), "integers"),
        (lambda: randint(True, 2), "integers"),
        (lambda: choice([]), "at least one value"),
        (lambda: choice([1, 1]), "duplicates"),
        (lambda: choice([object()]), "JSON values"),
        (lambda: choice("abc"), "list of values"),
    ],
)
def test_factories_refuse_bad_arguments(build, message):
    with pytest.raises(SpecError, match=message):
        build()


def test_randint_is_inclusive_at_both_ends():
    assert grid({"layers": randint(1, 4)}) == [{"layers": n} for n in (1, 2, 3, 4)]
    assert contains(RandInt(1, 4), 4) and not contains(RandInt(1, 4), 5)


@pytest.mark.parametrize(
    ("space", "algorithm", "where"),
    [
        ({}, "tpe", "space: is empty"),
        ({1: choice([1])}, "tpe", "space[1]: a parameter name"),
        ({"lr": 0.1}, "tpe", "space['lr']: is a float, not a dimension"),
        ({"lr": Uniform(2, 1)}, "tpe", "space['lr']: uniform"),
        ({"lr": uniform(0, 1)}, "bayes", "algorithm: must be one of"),
        ({"lr": uniform(0, 1)}, "grid", "space['lr']: grid search needs a finite set"),
        ([("lr", uniform(0, 1))], "tpe", "space: must be a dict"),
    ],
)
def test_validate_space_names_the_problem(space, algorithm, where):
    with pytest.raises(SpecError, match=where.replace("[", r"\[").replace("]", r"\]")):
        validate_space(space, algorithm=algorithm)


def test_grid_is_every_combination_in_a_fixed_order():
    space = {"hidden": choice([32, 64]), "layers": randint(1, 3)}
    combos = grid(space)
    assert combos[:2] == [{"hidden": 32, "layers": 1}, {"hidden": 32, "layers": 2}]
    assert len(combos) == grid_size(space) == 6
    assert len({tuple(sorted(c.items())) for c in combos}) == 6


def test_json_round_trip():
    space = {**SPACE, "layers": randint(1, 4), "opt": choice(["adam", {"name": "sgd", "momentum": 0.9}])}
    import json

    again = from_json(json.loads(json.dumps(to_json(space))))
    assert again == space
    assert isinstance(again["opt"], Choice) and again["opt"].values[1] == {"name": "sgd", "momentum": 0.9}


def test_from_json_refuses_unknown_forms():
    with pytest.raises(SpecError, match=r"space\['x'\]: unknown dimension"):
        from_json({"x": {"type": "normal", "mean": 0}})
    with pytest.raises(SpecError, match=r"space\['x'\]: loguniform"):
        from_json({"x": {"type": "loguniform", "low": -1, "high": 1}})


def test_contains_tells_json_types_apart():
    assert contains(Choice((1, "a")), 1.0)
    assert not contains(Choice((1, "a")), True)
    assert not contains(Uniform(0, 1), 1.5)
