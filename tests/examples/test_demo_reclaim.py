"""`make demo`'s reclaim verdicts (`tools/demo_reclaim.py`, `tools/demo.py`): a survivor of the reclaim that was
replaced or restarted, or a replacement that never healed from its peer, fails the demo."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from demo_reclaim import PodView, Reclaim, Survivors, healed_line, last_quorum

SURVIVOR = PodView(name="digits-final-x-trainer-0-0-aaaaa", uid="uid-0", index=0, phase="Running", restarts=0)
VICTIM = PodView(name="digits-final-x-trainer-1-0-bbbbb", uid="uid-1", index=1, phase="Running", restarts=0)
REPLACEMENT = PodView(name="digits-final-x-trainer-1-0-ccccc", uid="uid-2", index=1, phase="Running", restarts=0)


def test_a_survivor_that_kept_its_pod_and_never_restarted_is_untouched():
    survivors = Survivors([SURVIVOR])
    survivors.observe([SURVIVOR, REPLACEMENT])  # the victim's slot is not a survivor's
    assert not survivors.problems and not survivors.done
    survivors.observe([replace(SURVIVOR, phase="Succeeded"), REPLACEMENT])
    assert not survivors.problems and survivors.done
    assert survivors.lines() == [
        "survivor untouched: replica group 0's pod digits-final-x-trainer-0-0-aaaaa kept its uid uid-0 and "
        "restartCount 0 through the reclaim"
    ]


def test_a_survivor_replaced_by_another_pod_is_touched():
    survivors = Survivors([SURVIVOR])
    survivors.observe([replace(SURVIVOR, name="digits-final-x-trainer-0-0-ddddd", uid="uid-3")])
    assert survivors.lines() == [
        "survivor touched: replica group 0's pod digits-final-x-trainer-0-0-aaaaa was replaced by "
        "digits-final-x-trainer-0-0-ddddd"
    ]
    assert survivors.done  # nothing more to watch


def test_a_survivor_whose_container_restarted_is_touched():
    survivors = Survivors([SURVIVOR])
    survivors.observe([replace(SURVIVOR, restarts=1)])
    assert survivors.problems == {0: "replica group 0's pod digits-final-x-trainer-0-0-aaaaa restarted 1x"}


def test_survivors_whose_pods_are_gone_have_ended():
    survivors = Survivors([SURVIVOR])
    survivors.observe([REPLACEMENT])  # the group finished and its pods were deleted
    assert survivors.done and not survivors.problems


def test_the_heal_is_torchfts_line_naming_the_peer():
    log = (
        "replica group 1: resumed from epoch 132 (/c/step-000000132)\n"
        "2026-12-02T12:38:01.5 [INFO] [torchft::manager] - [Replica train_digits_ft_1] healing is required "
        "step=2112, max_step=2123, recover_src_replica_rank=0\n"
    )
    assert healed_line(log) == "healing is required step=2112, max_step=2123, recover_src_replica_rank=0"
    assert healed_line("replica group 1: resumed from epoch 132\n") is None


def test_the_last_quorum_the_trainer_logged():
    assert last_quorum("") == 0
    log = (
        "replica group 1: step 2: quorum of 1 replica group(s)\nreplica group 1: step 3: quorum of 2 replica group(s)\n"
    )
    assert last_quorum(log) == 2


def outcome(survivors: Survivors | None, healed: tuple[str, str] | None, **seen: object) -> Reclaim:
    """A reclaim (never started) with what its watch would have recorded."""
    reclaim = Reclaim(cluster=None, dag_id="nightly_training", emit=print)
    reclaim.survivors, reclaim.healed = survivors, healed
    reclaim.injected = {"node": "spot-1", "pod": VICTIM.name, "replica_group": 1, "step": 2} if survivors else None
    for name, value in seen.items():
        setattr(reclaim, name, value)
    return reclaim


@pytest.mark.parametrize(
    ("restarts", "healed", "status"),
    [
        (0, ("p", "healing is required step=1, max_step=9, recover_src_replica_rank=0"), 0),
        (1, ("p", "h"), 1),
        (0, None, 1),
    ],
)
def test_the_demo_fails_when_a_survivor_restarted_or_the_replacement_did_not_heal(restarts, healed, status):
    import demo

    survivors = Survivors([SURVIVOR])
    survivors.observe([replace(SURVIVOR, restarts=restarts)])
    shown: list[str] = []
    assert demo.reclaim_verdict(outcome(survivors, healed), shown.append) == status
    assert any(line.startswith("survivor untouched" if not restarts else "survivor touched") for line in shown)


def test_the_demo_fails_without_a_reclaim():
    import demo

    shown: list[str] = []
    assert demo.reclaim_verdict(outcome(None, None), shown.append) == 1
    assert shown == ["demo: the final training ended before a spot reclaim could be injected"]


@pytest.mark.parametrize(
    ("seen", "why"),
    [
        ({"ended_after": 31.4}, "(no replacement pod ran before the survivors ended, 31 s after the reclaim)"),
        (
            {"replacement": (REPLACEMENT.name, 28.6), "ended_after": 30.2},
            f"(its pod {REPLACEMENT.name} ran 29 s after the reclaim; the survivors ended 30 s after it)",
        ),
    ],
)
def test_a_missed_heal_says_when_the_replacement_ran_against_when_the_survivors_ended(seen, why):
    """The CI log of a failed demo must say whether the replacement came too late or ran and did not heal."""
    import demo

    shown: list[str] = []
    assert demo.reclaim_verdict(outcome(Survivors([SURVIVOR]), None, **seen), shown.append) == 1
    assert shown[-1] == f"demo: replica group 1's replacement never logged torchft's healing {why}"
