"""The board's ledger forgets old finished requests, but never a visitor's latest answer."""

from playground.handles import Ledger, RequestRecord


def _record(rid: str, owner: str | None, finished: bool = True) -> RequestRecord:
    return RequestRecord(request_id=rid, owner=owner, prompt="p", submitted=0.0, finished=finished)


def test_a_busy_board_keeps_each_owners_latest_answer():
    ledger = Ledger(max_records=8)
    ledger.put(_record("mine", "visitor:a"))  # the visitor's answer, then a flood of API calls
    for i in range(50):
        ledger.put(_record(f"api-{i}", "api:1"))
    ids = [r.request_id for r in ledger.records()]
    assert len(ids) == 8
    assert "mine" in ids
    assert ids[-1] == "api-49" and "api-0" not in ids  # the flood's oldest went first


def test_live_requests_are_never_forgotten_and_the_size_bound_holds():
    ledger = Ledger(max_records=4)
    ledger.put(_record("live", "visitor:a", finished=False))
    for i in range(10):  # each owner's only record: newest-of-owner cannot protect them all
        ledger.put(_record(f"u{i}", f"user:{i}"))
    ids = [r.request_id for r in ledger.records()]
    assert ids == ["live", "u7", "u8", "u9"]
    assert ledger.deltas("u0") == ()  # forgotten with their records


def test_an_owners_older_answers_go_before_anyone_elses_latest():
    ledger = Ledger(max_records=3)
    for rid, owner in [("b1", "visitor:b"), ("a1", "visitor:a"), ("a2", "visitor:a"),
                       ("a3", "visitor:a")]:  # fmt: skip
        ledger.put(_record(rid, owner))
    assert [r.request_id for r in ledger.records()] == ["b1", "a2", "a3"]
