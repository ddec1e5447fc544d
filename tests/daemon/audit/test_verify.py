"""``openbus audit verify`` proves a trail complete and untampered, or names the first flaw,
on the box's own store and on what a collector received."""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from openbus.daemon.audit.checkpoints import (
    Checkpointer,
    CheckpointPolicy,
    checkpoint_to_dict,
    load_or_create_key,
    public_pem,
    sign,
)
from openbus.daemon.audit.log import AuditLog
from openbus.daemon.audit.shipper import Shipper, make_exporter, resource_attributes
from openbus.daemon.audit.verify import Pin, Report, pubkey_pin, verify_db, verify_otlp_json
from openbus.daemon.config import AuditConfig
from openbus.daemon.core.audit import AuditDraft, canonical, record_hash
from openbus.daemon.state import StateDB
from openbus.kernel.testing import FixedClock
from tests.support.daemon import write_config
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.policy import signed_policy

RECORDS = 25
CHECKPOINT_EVERY = 10  # checkpoints at 10 and 20; 21..25 are the unverified tail


def build_trail(root: Path, clock: FixedClock, policy: CheckpointPolicy, gaps: list[float]) -> Path:
    """In ``root``: a chain of one record per gap (the clock advanced by it before each, the
    checkpointer ticked after each), and the JSON lines a real OTLP receiver wrote when the
    shipper exported it (every record sent twice, as after a crash)."""
    db = StateDB(root / "openbus.db")
    log = AuditLog(db, clock)
    checkpointer = Checkpointer(
        root / "openbus.db", load_or_create_key(root), box="box-1", clock=clock, policy=policy
    )
    for i, gap in enumerate(gaps):
        clock.advance(gap)
        log.append(
            AuditDraft(
                actor="human:root",
                action="pane.send",
                outcome="ok",
                target=f"%{i}",
                details={"n": i, "text": 'héllo "quoted"'},
            )
        )
        checkpointer.tick()
    checkpointer.close()
    db.close()
    with OtlpReceiver("grpc", root / "collector.jsonl") as receiver:
        for _ in range(2):
            exporter = make_exporter(AuditConfig(otlp_endpoint=receiver.endpoint))
            shipper = Shipper(
                root / "openbus.db",
                exporter,
                clock=clock,
                resource=resource_attributes("box-1", (root / "audit_key.pub").read_text()),
                batch_size=7,
            )
            shipper.exported_seq = shipper.exported_checkpoint = 0  # re-send everything
            while shipper.ship_once() != (True, 0):
                pass
            shipper.close()
    return root


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """25 records half a second apart, checkpoints at 10 and 20 (every 10 records)."""
    return build_trail(
        tmp_path_factory.mktemp("trail"),
        FixedClock(),
        CheckpointPolicy(CHECKPOINT_EVERY, 3600),
        [0.5] * RECORDS,
    )


# --------------------------------------------------------------------------- tampering


def tampered_db(trail: Path, tmp: Path, *statements: str) -> Path:
    target = tmp / "copy.db"
    source = sqlite3.connect(trail / "openbus.db")
    dest = sqlite3.connect(target)
    source.backup(dest)
    source.close()
    dest.executescript(
        "DROP TRIGGER audit_no_update; DROP TRIGGER audit_no_delete;" + ";".join(statements)
    )
    dest.close()
    return target


Requests = list[dict[str, Any]]


def load_lines(trail: Path) -> Requests:
    return [json.loads(line) for line in (trail / "collector.jsonl").read_text().splitlines()]


def write_lines(requests: Requests, path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return path


def log_records(requests: Requests) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(containing list, log record) for every log record, in file order."""
    out = []
    for request in requests:
        for rl in request["resourceLogs"]:
            for sl in rl["scopeLogs"]:
                out.extend((sl["logRecords"], item) for item in sl["logRecords"])
    return out


def attr(item: dict[str, Any], key: str) -> Any:
    for a in item["attributes"]:
        if a["key"] == key:
            value = a["value"]
            return int(value["intValue"]) if "intValue" in value else value["stringValue"]
    return None


def set_attr(item: dict[str, Any], key: str, value: Any) -> None:
    for a in item["attributes"]:
        if a["key"] == key:
            a["value"] = (
                {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}
            )


def of(
    requests: Requests, kind: str, seq: int
) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    return [
        (c, i)
        for c, i in log_records(requests)
        if attr(i, "openbus.kind") == kind and attr(i, "openbus.seq") == seq
    ]


def body(item: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(item["body"]["stringValue"])
    return data


def set_body(item: dict[str, Any], data: dict[str, Any]) -> None:
    item["body"]["stringValue"] = json.dumps(data, sort_keys=True, separators=(",", ":"))


def edit_byte(requests: Requests) -> None:
    for _, item in of(requests, "record", 7):
        item["body"]["stringValue"] = item["body"]["stringValue"].replace(
            "human:root", "human:roou"
        )


def delete_record(requests: Requests) -> None:
    for container, item in of(requests, "record", 12):
        container.remove(item)


def reorder_pair(requests: Requests) -> None:
    first = [i for _, i in of(requests, "record", 14)]
    second = [i for _, i in of(requests, "record", 15)]
    a, b = body(first[0]), body(second[0])
    a["seq"], b["seq"] = 15, 14  # record 15 now claims seq 14 and the other way round
    for item in first:
        set_body(item, b)
        set_attr(item, "openbus.hash", b["hash"])
        set_attr(item, "openbus.prev_hash", b["prev_hash"])
    for item in second:
        set_body(item, a)
        set_attr(item, "openbus.hash", a["hash"])
        set_attr(item, "openbus.prev_hash", a["prev_hash"])


def truncate_tail(requests: Requests) -> None:
    for seq in range(18, RECORDS + 1):
        for container, item in of(requests, "record", seq):
            container.remove(item)


def forge_checkpoint(requests: Requests) -> None:
    record19 = body(of(requests, "record", 19)[0][1])
    for _, item in of(requests, "checkpoint", 20):
        data = body(item)
        data["seq"], data["hash"] = 19, record19["hash"]
        set_body(item, data)
        set_attr(item, "openbus.seq", 19)
        set_attr(item, "openbus.hash", record19["hash"])


CASES: list[tuple[str, list[str], Callable[[Requests], None], int, str]] = [
    (
        "one edited byte",
        ["UPDATE audit SET actor = 'human:roou' WHERE seq = 7"],
        edit_byte,
        7,
        "edited",
    ),
    ("a deleted record", ["DELETE FROM audit WHERE seq = 12"], delete_record, 12, "missing"),
    (
        "a reordered pair",
        [
            "CREATE TABLE t AS SELECT * FROM audit WHERE seq IN (14, 15)",
            "UPDATE audit SET time = (SELECT time FROM t WHERE seq = 29 - audit.seq), "
            "actor = (SELECT actor FROM t WHERE seq = 29 - audit.seq), "
            "target = (SELECT target FROM t WHERE seq = 29 - audit.seq), "
            "details = (SELECT details FROM t WHERE seq = 29 - audit.seq), "
            "prev_hash = (SELECT prev_hash FROM t WHERE seq = 29 - audit.seq), "
            "hash = (SELECT hash FROM t WHERE seq = 29 - audit.seq) WHERE seq IN (14, 15)",
        ],
        reorder_pair,
        14,
        "seq 14",
    ),
    (
        "a tail truncated after a checkpoint",
        ["DELETE FROM audit WHERE seq >= 18"],
        truncate_tail,
        18,
        "truncated",
    ),
    (
        "a forged checkpoint",
        [
            "UPDATE audit_checkpoints SET seq = 19, hash = (SELECT hash FROM audit WHERE seq = 19) "
            "WHERE seq = 20"
        ],
        forge_checkpoint,
        19,
        "forged",
    ),
]
IDS = [case[0] for case in CASES]


def pinned(trail: Path) -> Pin:
    return pubkey_pin(trail / "audit_key.pub")


def assert_flaw(report: Report, seq: int, word: str) -> None:
    assert not report.ok, report.text()
    assert report.bad_seq == seq, report.text()
    assert word in (report.problem or ""), report.text()


# --------------------------------------------------------------------------- the tests


def test_an_untouched_local_store_verifies_and_names_its_unverified_tail(trail: Path) -> None:
    report = verify_db(trail / "openbus.db", pinned(trail))
    assert report.ok, report.text()
    assert report.records == RECORDS and report.checkpoints == 2
    assert report.verified_through == 20
    assert report.unverified_tail == (21, RECORDS)
    assert "unverified tail: seq 21..25" in report.text()


def test_what_the_collector_received_verifies_with_duplicates_collapsed(trail: Path) -> None:
    report = verify_otlp_json(trail / "collector.jsonl", pinned(trail))
    assert report.ok, report.text()
    assert report.records == RECORDS and report.verified_through == 20
    assert report.unverified_tail == (21, RECORDS)


def test_log_records_in_any_order_across_requests_still_verify(trail: Path, tmp_path: Path) -> None:
    requests = load_lines(trail)
    requests.reverse()
    report = verify_otlp_json(write_lines(requests, tmp_path / "c.jsonl"), pinned(trail))
    assert report.ok, report.text()


@pytest.mark.parametrize(("name", "sql", "tamper", "seq", "word"), CASES, ids=IDS)
def test_tampering_with_the_local_store_is_detected(
    trail: Path, tmp_path: Path, name: str, sql: list[str], tamper: Any, seq: int, word: str
) -> None:
    report = verify_db(tampered_db(trail, tmp_path, *sql), pinned(trail))
    assert_flaw(report, seq, word)


@pytest.mark.parametrize(("name", "sql", "tamper", "seq", "word"), CASES, ids=IDS)
def test_tampering_with_what_the_collector_received_is_detected(
    trail: Path, tmp_path: Path, name: str, sql: list[str], tamper: Any, seq: int, word: str
) -> None:
    requests = copy.deepcopy(load_lines(trail))
    tamper(requests)
    report = verify_otlp_json(write_lines(requests, tmp_path / "c.jsonl"), pinned(trail))
    assert_flaw(report, seq, word)


def test_a_checkpoint_signed_by_another_key_is_forged(trail: Path, tmp_path: Path) -> None:
    mallory = Ed25519PrivateKey.generate()
    forged = sign(mallory, seq=20, hash="0" * 64, time=1.0, box="box-1")
    path = tampered_db(
        trail,
        tmp_path,
        f"UPDATE audit_checkpoints SET signature = '{forged.signature}' WHERE seq = 20",
    )
    assert_flaw(verify_db(path, pinned(trail)), 20, "forged")


def test_one_copy_of_a_record_altered_among_duplicates_is_detected(
    trail: Path, tmp_path: Path
) -> None:
    requests = copy.deepcopy(load_lines(trail))
    _, item = of(requests, "record", 5)[1]
    item["body"]["stringValue"] = item["body"]["stringValue"].replace("pane.send", "pane.sent")
    report = verify_otlp_json(write_lines(requests, tmp_path / "c.jsonl"), pinned(trail))
    assert_flaw(report, 5, "two different copies")


@pytest.mark.parametrize(
    "spoil",
    [lambda line: line[:-5], lambda line: "[" * 100_000 + "]" * 100_000],
    ids=["cut", "nested past the decoder"],
)
def test_a_line_that_is_not_json_is_named(
    trail: Path, tmp_path: Path, spoil: Callable[[str], str]
) -> None:
    path = tmp_path / "c.jsonl"
    lines = (trail / "collector.jsonl").read_text().splitlines()
    lines[1] = spoil(lines[1])
    path.write_text("\n".join(lines) + "\n")
    report = verify_otlp_json(path, pinned(trail))
    assert not report.ok and report.problem == "line 2 is not valid JSON"


def run_audit(verb: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``openbus audit VERB``, with no config of the developer's in the way."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBUS_CONFIG"}
    env["XDG_CONFIG_HOME"] = "/nonexistent/openbus-test-config"
    return subprocess.run(
        [sys.executable, "-m", "openbus.daemon.cli", "audit", verb, *args],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
        env=env,
    )


def run_verify(*args: str) -> subprocess.CompletedProcess[str]:
    return run_audit("verify", *args)


def test_the_cli_exits_non_zero_and_names_the_first_bad_record(trail: Path, tmp_path: Path) -> None:
    bad_db = tampered_db(trail, tmp_path, "DELETE FROM audit WHERE seq = 12")
    result = run_verify("--db", str(bad_db), "--pubkey", str(trail / "audit_key.pub"))
    assert result.returncode == 1
    assert "BAD: seq 12 missing" in result.stdout

    requests = copy.deepcopy(load_lines(trail))
    edit_byte(requests)
    path = write_lines(requests, tmp_path / "c.jsonl")
    result = run_verify(
        "--otlp-json", str(path), "--pubkey", str(trail / "audit_key.pub"), "--json"
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["bad_seq"] == 7 and "edited" in report["problem"]


def test_the_cli_passes_a_clean_stream_and_reports_the_tail(trail: Path) -> None:
    result = run_verify(
        "--otlp-json", str(trail / "collector.jsonl"), "--pubkey", str(trail / "audit_key.pub")
    )
    assert result.returncode == 0, result.stderr
    assert "chain intact" in result.stdout and "unverified tail: seq 21..25" in result.stdout


def test_without_a_pinned_key_the_cli_fails_origin_not_verified_but_reports_the_chain(
    trail: Path,
) -> None:
    result = run_verify("--otlp-json", str(trail / "collector.jsonl"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BAD: origin not verified" in result.stdout and "--pubkey FILE" in result.stdout
    assert "chain intact: 25 records (seq 1..25)" in result.stdout
    assert "signatures not checked" in result.stdout
    result = run_verify("--otlp-json", str(trail / "collector.jsonl"), "--json")
    report = json.loads(result.stdout)
    assert report["chain_intact"] is True and report["origin_verified"] is False


def test_checkpoints_without_any_key_to_check_them_fail(trail: Path, tmp_path: Path) -> None:
    requests = load_lines(trail)
    for request in requests:
        for rl in request["resourceLogs"]:
            rl["resource"]["attributes"] = [
                a for a in rl["resource"]["attributes"] if a["key"] != "openbus.audit_key"
            ]
    result = run_verify("--otlp-json", str(write_lines(requests, tmp_path / "c.jsonl")))
    assert result.returncode == 1
    assert "origin not verified" in result.stdout and "pass --pubkey" in result.stdout


# --------------------------------------------------------------------------- origin


def rechained(records: dict[int, dict[str, Any]], edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit record 7, then recompute every hash from there on: a chain that is intact again."""
    edit(records[7])
    prev = records[6]["hash"]
    for seq in sorted(s for s in records if s >= 7):
        record = records[seq]
        record["prev_hash"] = prev
        record["hash"] = prev = record_hash(prev, {k: v for k, v in record.items() if k != "hash"})


def forge_stream(trail: Path, mallory: Ed25519PrivateKey) -> Requests:
    """What the collector received, with record 7 edited, the chain after it recomputed, the
    checkpoints re-signed by ``mallory`` and her public key in the resource."""
    requests = copy.deepcopy(load_lines(trail))
    records = {
        seq: body(item)
        for _, item in log_records(requests)
        if attr(item, "openbus.kind") == "record"
        for seq in [attr(item, "openbus.seq")]
    }
    rechained(records, lambda r: r.update(actor="human:mallory"))
    mallory_pem = public_pem(mallory.public_key()).decode("ascii")
    for request in requests:
        for rl in request["resourceLogs"]:
            for a in rl["resource"]["attributes"]:
                if a["key"] == "openbus.audit_key":
                    a["value"] = {"stringValue": mallory_pem}
    for _, item in log_records(requests):
        seq = attr(item, "openbus.seq")
        if attr(item, "openbus.kind") == "record":
            item["body"]["stringValue"] = canonical(records[seq]).decode("ascii")
            set_attr(item, "openbus.hash", records[seq]["hash"])
            set_attr(item, "openbus.prev_hash", records[seq]["prev_hash"])
        else:
            old = body(item)
            cp = sign(mallory, seq=seq, hash=records[seq]["hash"], time=old["time"], box=old["box"])
            item["body"]["stringValue"] = canonical(checkpoint_to_dict(cp)).decode("ascii")
            set_attr(item, "openbus.hash", cp.hash)
            set_attr(item, "openbus.signature", cp.signature)
    return requests


def forge_db(trail: Path, tmp: Path, mallory: Ed25519PrivateKey) -> Path:
    """A copy of the database, edited, re-chained and re-signed by ``mallory``, with her
    ``audit_key.pub`` lying beside it."""
    copy_dir = tmp / "copy"
    copy_dir.mkdir()
    path = tampered_db(trail, copy_dir)
    conn = sqlite3.connect(path)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(audit)")]
    records = {}
    for row in conn.execute(f"SELECT {', '.join(columns)} FROM audit"):
        record = dict(zip(columns, row, strict=True))
        record["details"] = json.loads(record["details"])
        records[record["seq"]] = record
    rechained(records, lambda r: r.update(actor="human:mallory"))
    for seq, record in records.items():
        conn.execute(
            "UPDATE audit SET actor = ?, prev_hash = ?, hash = ? WHERE seq = ?",
            (record["actor"], record["prev_hash"], record["hash"], seq),
        )
    for seq, at, box in conn.execute("SELECT seq, time, box FROM audit_checkpoints").fetchall():
        cp = sign(mallory, seq=seq, hash=records[seq]["hash"], time=at, box=box)
        conn.execute(
            "UPDATE audit_checkpoints SET hash = ?, signature = ? WHERE seq = ?",
            (cp.hash, cp.signature, seq),
        )
    conn.commit()
    conn.close()
    (copy_dir / "audit_key.pub").write_bytes(public_pem(mallory.public_key()))
    return path


def box_fingerprint(trail: Path) -> str:
    """What ``openbus audit key`` prints for the box's key: the line an admin pins."""
    result = run_audit("key", "--pubkey", str(trail / "audit_key.pub"), "--json")
    assert result.returncode == 0, result.stderr
    fingerprint: str = json.loads(result.stdout)["fingerprint"]
    return fingerprint


def org_policy(trail: Path, directory: Path, box: str = "box-1") -> list[str]:
    """A signed org policy pinning the box's real audit key; the verify flags that use it."""
    text = (
        'org = "test"\nversion = 1\nissued = "2026-11-30T00:00:00Z"\n\n'
        f'[audit.key_fingerprints]\n"{box}" = "{box_fingerprint(trail)}"\n'
    )
    section = signed_policy(directory, text)
    return ["--policy", section["file"], "--org-key", section["org_public_key"]]


def test_a_re_chained_re_signed_stream_carrying_its_own_key_is_not_trusted(
    trail: Path, tmp_path: Path
) -> None:
    mallory = Ed25519PrivateKey.generate()
    forged = write_lines(forge_stream(trail, mallory), tmp_path / "forged.jsonl")
    policy = org_policy(trail, tmp_path / "org")

    # the forgery is self-consistent: only a pinned key can tell
    result = run_verify("--otlp-json", str(forged))
    assert result.returncode == 1, result.stdout
    assert "BAD: origin not verified" in result.stdout and "chain intact" in result.stdout

    result = run_verify("--otlp-json", str(forged), "--pubkey", str(trail / "audit_key.pub"))
    assert result.returncode == 1, result.stdout
    assert "BAD: checkpoint at seq 10: signature does not verify (forged)" in result.stdout

    result = run_verify("--otlp-json", str(forged), *policy)
    assert result.returncode == 1, result.stdout
    assert "BAD: origin not verified" in result.stdout
    assert "for box 'box-1'" in result.stdout and "the stream's resource" in result.stdout

    result = run_verify("--otlp-json", str(trail / "collector.jsonl"), *policy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"origin: box 'box-1' (audit key {box_fingerprint(trail)})" in result.stdout


def test_a_database_copy_is_not_vouched_for_by_the_key_lying_beside_it(
    trail: Path, tmp_path: Path
) -> None:
    forged = forge_db(trail, tmp_path, Ed25519PrivateKey.generate())
    policy = org_policy(trail, tmp_path / "org")

    result = run_verify("--db", str(forged))
    assert result.returncode == 1, result.stdout
    assert "BAD: origin not verified" in result.stdout and "chain intact" in result.stdout

    result = run_verify("--db", str(forged), *policy)
    assert result.returncode == 1, result.stdout
    assert "BAD: origin not verified" in result.stdout and "audit_key.pub" in result.stdout

    result = run_verify("--db", str(forged), "--pubkey", str(trail / "audit_key.pub"))
    assert result.returncode == 1 and "forged" in result.stdout, result.stdout

    # the real database: the key beside it is used only because the policy pins it
    result = run_verify("--db", str(trail / "openbus.db"), *policy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "origin: box 'box-1'" in result.stdout


def test_a_policy_pinning_another_box_or_key_does_not_verify_this_one(
    trail: Path, tmp_path: Path
) -> None:
    policy = org_policy(trail, tmp_path / "org", box="box-2")
    result = run_verify("--otlp-json", str(trail / "collector.jsonl"), *policy)
    assert result.returncode == 1, result.stdout
    assert "pins no audit key for box 'box-1'" in result.stdout

    # a policy signed by another org key is refused outright, as the daemon refuses it
    other = signed_policy(
        tmp_path / "other", "org = 'x'\nversion = 1\nissued = 2026-01-01T00:00:00Z\n"
    )
    flags = ["--policy", policy[1], "--org-key", other["org_public_key"]]
    result = run_verify("--otlp-json", str(trail / "collector.jsonl"), *flags)
    assert result.returncode == 2 and "does not verify" in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


def test_the_configs_org_policy_is_the_default_pin(trail: Path, tmp_path: Path) -> None:
    policy = org_policy(trail, tmp_path / "org")
    config = write_config(
        tmp_path / "openbus.toml", {"policy": {"file": policy[1], "org_public_key": policy[3]}}
    )
    result = run_verify("--otlp-json", str(trail / "collector.jsonl"), "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"from [policy] in {config}" in result.stdout


def test_policy_and_org_key_go_together(trail: Path) -> None:
    result = run_verify("--otlp-json", str(trail / "collector.jsonl"), "--policy", "p.toml")
    assert result.returncode == 1 and "--policy needs --org-key" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_missing_input_file_is_a_clear_error(tmp_path: Path) -> None:
    result = run_verify("--otlp-json", str(tmp_path / "nope.jsonl"))
    assert result.returncode == 2
    assert "nope.jsonl" in result.stderr and "Traceback" not in result.stderr


# --------------------------------------------------------------------------- completeness

SPREAD_CADENCE = CheckpointPolicy(every=10, seconds=60)
CADENCE_FLAGS = ["--checkpoint-every", "10", "--checkpoint-seconds", "60"]


@pytest.fixture(scope="module")
def spread(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A month-old trail signed every 10 records or 60 s: a busy spell (records 1..30, 3 s
    apart: checkpoints at 10, 20, 30 by count) then a quiet one (31..40, 25 s apart:
    checkpoints at 33, 36, 39 by time); record 40 is the unverified tail."""
    return build_trail(
        tmp_path_factory.mktemp("spread"),
        FixedClock(start=time.time() - 30 * 86400),
        SPREAD_CADENCE,
        [3.0] * 30 + [25.0] * 10,
    )


def dropped(
    trail: Path,
    tmp: Path,
    *,
    checkpoints: set[int],
    records: frozenset[int] | set[int] = frozenset(),
) -> Path:
    """The collector's file with every copy of those checkpoints and records taken out."""
    requests = copy.deepcopy(load_lines(trail))
    for container, item in log_records(requests):
        kind, seq = attr(item, "openbus.kind"), attr(item, "openbus.seq")
        if seq in (checkpoints if kind == "checkpoint" else records):
            container.remove(item)
    return write_lines(requests, tmp / "cut.jsonl")


def verify_spread(path: Path, spread: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_verify("--otlp-json", str(path), "--pubkey", str(spread / "audit_key.pub"), *flags)


def test_the_spread_trail_verifies_and_says_when_its_tail_is_due(spread: Path) -> None:
    result = verify_spread(spread / "collector.jsonl", spread, *CADENCE_FLAGS)
    assert result.returncode == 0, result.stdout
    assert "unverified tail: seq 40..40" in result.stdout
    assert "a checkpoint covering it is due by" in result.stdout
    assert "cannot be told from a daemon killed before it signed" in result.stdout


def test_dropping_the_last_checkpoint_line_fails_when_records_run_past_its_due_time(
    spread: Path, tmp_path: Path
) -> None:
    result = verify_spread(dropped(spread, tmp_path, checkpoints={39}), spread, *CADENCE_FLAGS)
    assert result.returncode == 1, result.stdout
    assert "BAD: checkpoint missing: seq 37..40 follow the last checkpoint (seq 36)" in (
        result.stdout
    )
    report = json.loads(
        verify_spread(
            dropped(spread, tmp_path, checkpoints={39}), spread, *CADENCE_FLAGS, "--json"
        ).stdout
    )
    assert report["bad_seq"] == 37 and report["last_checkpoint"]["seq"] == 36
    assert report["cadence"] == {"every": 10, "seconds": 60.0, "slack": 5.0}


def test_records_cut_together_with_their_checkpoints_fail_when_a_checkpoint_was_due(
    spread: Path, tmp_path: Path
) -> None:
    path = dropped(spread, tmp_path, checkpoints={36, 39}, records={38, 39, 40})
    result = verify_spread(path, spread, *CADENCE_FLAGS)
    assert result.returncode == 1, result.stdout
    assert "BAD: checkpoint missing: seq 34..37" in result.stdout


def test_the_count_rule_catches_a_busy_spell_cut_short(spread: Path, tmp_path: Path) -> None:
    """Records 11..29 came 3 s apart: the checkpoint at 20 was due when record 20 was
    written, and 27 s of records follow it. The time rule alone (60 s) would not see it."""
    path = dropped(spread, tmp_path, checkpoints={20, 30, 33, 36, 39}, records=set(range(30, 41)))
    result = verify_spread(path, spread, *CADENCE_FLAGS)
    assert result.returncode == 1 and "BAD: checkpoint missing: seq 11..29" in result.stdout
    # told a cadence of 1000 records, verify can only apply the time rule: not overdue
    result = verify_spread(path, spread, "--checkpoint-every", "1000")
    assert result.returncode == 0, result.stdout


def test_a_dropped_checkpoint_that_a_later_one_covers_loses_nothing(
    spread: Path, tmp_path: Path
) -> None:
    result = verify_spread(dropped(spread, tmp_path, checkpoints={30}), spread, *CADENCE_FLAGS)
    assert result.returncode == 0, result.stdout


def test_a_cut_within_one_cadence_of_the_end_is_reported_as_a_tail_not_passed_silently(
    spread: Path, tmp_path: Path
) -> None:
    """The documented limit: cutting the last checkpoint and what follows it, within one
    cadence, is what a box killed before it signed leaves behind."""
    path = dropped(spread, tmp_path, checkpoints={39}, records={40})
    result = verify_spread(path, spread, *CADENCE_FLAGS)
    assert result.returncode == 0, result.stdout
    assert "unverified tail: seq 37..39" in result.stdout
    assert "cannot be told from a daemon killed before it signed" in result.stdout


def test_a_database_cut_with_its_checkpoints_fails_under_the_boxs_own_cadence(
    spread: Path, tmp_path: Path
) -> None:
    cut = tampered_db(
        spread,
        tmp_path,
        "DELETE FROM audit WHERE seq >= 38",
        "DELETE FROM audit_checkpoints WHERE seq >= 36",
    )
    config = write_config(
        tmp_path / "openbus.toml", {"audit": {"checkpoint_every": 10, "checkpoint_seconds": 60}}
    )
    result = run_verify(
        "--db", str(cut), "--pubkey", str(spread / "audit_key.pub"), "--config", str(config)
    )
    assert result.returncode == 1, result.stdout
    assert "BAD: checkpoint missing: seq 34..37" in result.stdout


def test_a_database_whose_tail_is_overdue_now_says_so(spread: Path, tmp_path: Path) -> None:
    """A month later, record 40 is still unsigned: no running daemon leaves that (it signs such
    a tail as it starts), so verify warns; the database alone cannot tell a removed checkpoint
    from a daemon that has not run since."""
    result = run_verify(
        "--db",
        str(spread / "openbus.db"),
        "--pubkey",
        str(spread / "audit_key.pub"),
        *CADENCE_FLAGS,
    )
    assert result.returncode == 0, result.stdout
    assert "warning: the tail is overdue now: a checkpoint covering seq 40" in result.stdout


def test_a_sequence_gap_in_the_unsigned_tail_or_at_the_start_fails(
    trail: Path, tmp_path: Path
) -> None:
    result = run_verify(
        "--otlp-json",
        str(dropped(trail, tmp_path, checkpoints=set(), records={23})),
        "--pubkey",
        str(trail / "audit_key.pub"),
    )
    assert result.returncode == 1 and "BAD: seq 23 missing" in result.stdout, result.stdout
    result = run_verify(
        "--otlp-json",
        str(dropped(trail, tmp_path, checkpoints=set(), records={1, 2, 3})),
        "--pubkey",
        str(trail / "audit_key.pub"),
    )
    assert result.returncode == 1 and "BAD: seq 1..3 missing" in result.stdout, result.stdout
