"""The promotion rule's grey zone: within the tolerance promoted, beyond it by at most the review margin a person
decides, further refused; what the approver is shown."""

from __future__ import annotations

import pytest

from airflow_elastic.serving import publishing
from airflow_elastic.serving.publishing import Promotion, decide


@pytest.mark.parametrize(
    ("candidate", "mode", "verdict"),
    [  # incumbent 0.5, tolerance 0.125, review margin 0.25 (binary fractions: the edges are exact)
        (0.75, "max", "promote"),  # better
        (0.375, "max", "promote"),  # worse by the tolerance
        (0.25, "max", "review"),  # beyond the tolerance, within tolerance + margin
        (0.125, "max", "review"),  # at the edge
        (0.0, "max", "refuse"),  # beyond the margin
        (0.75, "min", "review"),  # lower is better: 0.25 worse
        (1.0, "min", "refuse"),
    ],
)
def test_a_small_regression_waits_for_a_person_a_large_one_is_refused(candidate, mode, verdict):
    promotion = decide({"m": candidate}, {"m": 0.5}, metric="m", mode=mode, tolerance=0.125, review_margin=0.25)
    got = "promote" if promotion.promote else "review" if promotion.review else "refuse"
    assert got == verdict, promotion.reason
    if verdict == "review":
        assert promotion.reason.endswith("review margin 0.25): waits for approval")
    if verdict == "refuse":
        assert promotion.reason.endswith("review margin 0.25): not promoted")


def test_without_a_margin_nothing_waits():
    promotion = decide({"m": 0.93}, {"m": 0.94}, metric="m")
    assert not promotion.promote and not promotion.review and promotion.reason.endswith("(tolerance 0): not promoted")


def test_a_bad_margin_is_refused():
    with pytest.raises(ValueError, match="review_margin must be"):
        decide({"m": 1.0}, None, metric="m", review_margin=-0.1)


def test_an_approval_promotes_only_a_candidate_under_review_and_names_the_approver():
    review = decide({"m": 0.93}, {"m": 0.94}, metric="m", review_margin=0.05)
    approved = review.approved("alice")
    assert approved.promote and approved.approved_by == "alice" and approved.review
    assert approved.reason.endswith("review margin 0.05): approved by alice")
    assert Promotion.from_json(approved.to_json()) == approved
    for not_under_review in (decide({"m": 0.95}, {"m": 0.94}, metric="m"), decide({"m": 0.5}, {"m": 0.94}, metric="m")):
        with pytest.raises(ValueError, match="only a candidate under review"):
            not_under_review.approved("alice")
    with pytest.raises(ValueError, match="only a candidate under review"):
        approved.approved("bob")


def test_the_approver_sees_the_comparison():
    review = decide({"test_accuracy": 0.93, "test_loss": 0.2}, {"test_accuracy": 0.94}, metric="test_accuracy",
                    review_margin=0.05)  # fmt: skip
    report = publishing.run_report(
        run_id="manual__1",
        version="manual__1",
        sweep={"best_params": {"lr": 0.01}},
        train={"spot_share": 0.5},
        evaluation={"test_accuracy": 0.93, "test_loss": 0.2, "checkpoint": "/c"},
        promotion=review,
        objective="val_loss",
        locations={"version": "/m/manual__1"},
    )
    text = publishing.review_text(report)
    assert "| test_accuracy | 0.93 | 0.94 | -0.01 |" in text
    assert "waits for approval" in text and "test_loss=0.2" in text and "lr=0.01" in text
    assert "/m/manual__1" in text and "no answer in time: latest stays" in text
