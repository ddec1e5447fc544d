"""The audit record and its hash chain, as values."""

from __future__ import annotations

import json

import pytest

from openbus.daemon.core.audit import (
    GENESIS,
    AuditDraft,
    Checkpoint,
    canonical,
    record_from_dict,
    record_hash,
    seal,
    seal_parts,
)


def draft(**kw: object) -> AuditDraft:
    fields: dict[str, object] = {"actor": "human:ann", "action": "pane.send", "outcome": "ok"}
    fields.update(kw)
    return AuditDraft(**fields)  # type: ignore[arg-type]


def test_canonical_form_is_sorted_compact_ascii() -> None:
    assert canonical({"b": 1, "a": "é"}) == b'{"a":"\\u00e9","b":1}'


def test_a_sealed_record_links_to_its_predecessor_and_hashes_its_body() -> None:
    first = seal(draft(), seq=1, time=1.0, prev_hash=GENESIS)
    second = seal(draft(target="%1"), seq=2, time=2.0, prev_hash=first.hash)
    assert first.prev_hash == GENESIS and second.prev_hash == first.hash
    assert second.hash == record_hash(first.hash, second.body())
    assert "hash" not in second.body()


def test_any_change_to_a_record_changes_its_hash() -> None:
    record = seal(draft(details={"n": 1}), seq=1, time=1.0, prev_hash=GENESIS)
    for change in ({"actor": "human:bob"}, {"seq": 2}, {"details": {"n": 2}}, {"time": 1.000001}):
        altered = {**record.body(), **change}
        assert record_hash(record.prev_hash, altered) != record.hash


def test_a_record_survives_a_json_round_trip_with_the_same_hash() -> None:
    record = seal(
        draft(details={"text": 'héllo "x"', "n": 3}), seq=7, time=1.2345678, prev_hash=GENESIS
    )
    again = record_from_dict(json.loads(canonical(record.to_dict())))
    assert again == record
    assert record_hash(again.prev_hash, again.body()) == record.hash


def test_an_unknown_outcome_is_refused() -> None:
    with pytest.raises(ValueError, match="outcome"):
        draft(outcome="maybe")


def test_a_checkpoint_payload_covers_seq_hash_time_and_box() -> None:
    cp = Checkpoint(seq=3, hash="ab", time=1.5, box="b")
    assert json.loads(cp.payload()) == {"seq": 3, "hash": "ab", "time": 1.5, "box": "b"}


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"target": "%1", "scope": "read", "message_id": "m-1"},
        {"actor": 'human:"quoted"\\back', "target": "é\u2028\x00\ud83d"},
        {"details": {"z": [1, 2.5, None, True], "a": {"y": "ü", "b": float("inf")}}},
        {"details": {"count": 0, "after": 10**18}},
    ],
)
@pytest.mark.parametrize("seq, time", [(1, 1.0), (2**40, 1764487800.123456789), (3, 7)])
def test_the_fast_seal_hashes_exactly_what_canonical_json_hashes(
    fields: dict[str, object], seq: int, time: float
) -> None:
    record, details_json = seal_parts(draft(**fields), seq=seq, time=time, prev_hash=GENESIS)
    assert record.hash == record_hash(GENESIS, record.body())
    assert details_json == canonical(dict(record.details)).decode("ascii")
    assert seal(draft(**fields), seq=seq, time=time, prev_hash=GENESIS) == record
