"""The counting helpers every benchmark's metrics are made of, on hand-made records (values by hand)."""

from __future__ import annotations

from paravt_core.eval.tally import accuracy, grouped_accuracy, pct, scored


def _ok(score: float, **meta) -> dict:
    return {"status": "ok", "score": score, "meta": meta}


ERR = {"status": "error", "score": None, "meta": {"duration": "short"}}


def test_pct_is_the_mean_times_100_and_none_for_nothing():
    assert pct([]) is None
    assert pct([1.0, 0.0, 0.0, 1.0]) == 50.0
    assert pct([0.5]) == 50.0
    assert pct([1.0, 1.0, 0.25]) == 75.0  # 2.25 / 3 x 100


def test_scored_keeps_only_ok_records_in_order():
    a, b = _ok(1.0), _ok(0.0)
    assert scored([a, ERR, {"score": 1.0}, b]) == [a, b]  # a record without a status is not scored
    assert scored(iter([ERR])) == []


def test_accuracy_leaves_errors_out_and_is_none_without_a_scored_record():
    assert accuracy([_ok(1.0), ERR, _ok(0.0), _ok(1.0), ERR]) == 200.0 / 3
    assert accuracy([ERR, ERR]) is None
    assert accuracy([]) is None
    assert accuracy([{"status": "ok", "score": True}]) == 100.0  # a bool score counts as 1


def test_grouped_accuracy_groups_by_meta_orders_and_names_missing_groups():
    records = [
        _ok(1.0, duration="long"),
        _ok(0.0, duration="long"),
        _ok(1.0, duration="short"),
        _ok(1.0, duration="alpha"),
        _ok(0.0, duration="zeta"),
        {"status": "ok", "score": 1.0},  # no meta: group "None"
        {"status": "ok", "score": 0.0, "meta": None},  # meta None: group "None" as well
        ERR,  # an error counts in no group
    ]
    got = grouped_accuracy(records, "duration", ("short", "medium", "long"))
    # order's groups first (medium has no record: absent), then the others sorted: None, alpha, zeta
    assert list(got) == ["short", "long", "None", "alpha", "zeta"]
    assert got == {"short": 100.0, "long": 50.0, "None": 50.0, "alpha": 100.0, "zeta": 0.0}
    assert grouped_accuracy(records, "duration") == {
        "None": 50.0,
        "alpha": 100.0,
        "long": 50.0,
        "short": 100.0,
        "zeta": 0.0,
    }
    assert list(grouped_accuracy([_ok(1.0, n=2), _ok(0.0, n=10)], "n")) == [
        "10",
        "2",
    ]  # keys as strings, sorted
    assert grouped_accuracy([ERR], "duration", ("short",)) == {}
