"""``openbus audit tail [--json] [--follow]`` and ``openbus audit verify``.

``tail`` reads the daemon's audit trail over the human API (itself an audited read) and
shows the export lag; ``--follow`` keeps printing records as they are committed. ``verify``
runs locally, without the daemon: on a state database (``--db``, default the configured
one) or on the JSON lines a collector's file exporter wrote (``--otlp-json``). It prints
what it proved, names the first bad record, and exits 1 when it found one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from openbus.daemon.audit.verify import verify_db, verify_otlp_json
from openbus.daemon.cli_common import EXIT_ERROR, add_common, emit
from openbus.daemon.client import DaemonClient
from openbus.daemon.config import Config

TAIL_DEFAULT = 20


def register(sub: Any) -> None:
    audit = sub.add_parser("audit", help="the audit trail: tail it, verify it")
    verbs = audit.add_subparsers(dest="audit_verb", metavar="VERB")
    verbs.required = True

    tail = verbs.add_parser("tail", help="show the latest audit records and the export lag")
    add_common(tail)
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new records")
    tail.add_argument("--after", type=int, metavar="SEQ", help="start after this seq")
    tail.add_argument(
        "-n", "--lines", type=int, default=TAIL_DEFAULT, metavar="N", help="how many records"
    )
    tail.set_defaults(handler=_tail)

    verify = verbs.add_parser("verify", help="prove the chain complete and untampered")
    add_common(verify)
    source = verify.add_mutually_exclusive_group()
    source.add_argument("--db", metavar="FILE", help="a state database (default: this box's)")
    source.add_argument(
        "--otlp-json",
        metavar="FILE",
        help="JSON lines from an OpenTelemetry Collector file exporter",
    )
    verify.add_argument(
        "--pubkey", metavar="FILE", help="the box's audit public key (audit_key.pub)"
    )
    verify.set_defaults(handler=_verify)


# --------------------------------------------------------------------------- tail


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )


def format_record(record: dict[str, Any]) -> str:
    parts = [
        f"{record['seq']:>8}",
        _when(float(record["time"])),
        str(record["actor"]),
        str(record["action"]),
        str(record["outcome"]),
    ]
    if record.get("target"):
        parts.append(f"target={record['target']}")
    if record.get("message_id"):
        parts.append(f"message={record['message_id']}")
    details = record.get("details") or {}
    if details:
        parts.append(json.dumps(details, sort_keys=True, separators=(",", ":")))
    return "  ".join(parts)


def format_export(status: dict[str, Any]) -> str:
    if not status:
        return "export: unknown"
    if "error" in status:
        return f"export: {status['error']}"
    endpoint = status.get("endpoint")
    if not endpoint:
        return f"export: no OTLP endpoint configured (head seq {status.get('seq')})"
    reach = {True: "reachable", False: "NOT reachable", None: "not tried yet"}[
        status.get("endpoint_reachable")
    ]
    return (
        f"export: seq {status.get('exported_seq')} of {status.get('seq')} shipped to {endpoint} "
        f"({reach}); lag {status.get('lag_records')} records, {status.get('lag_seconds')} s"
    )


def _tail(args: argparse.Namespace, config: Config) -> int:
    client = DaemonClient(config)
    try:
        if args.after is not None:
            after = max(0, args.after)
        else:
            health = client.get("/healthz") or {}
            head = int((health.get("audit") or {}).get("seq") or 0)
            after = max(0, head - max(1, args.lines))
        if args.follow:
            for line in client.stream_lines("/api/audit/stream", {"after": after}):
                if not line.strip():
                    continue
                if args.json:
                    sys.stdout.write(line + "\n")
                else:
                    sys.stdout.write(format_record(json.loads(line)) + "\n")
                sys.stdout.flush()
            return 0
        page = client.get("/api/audit", after=after, limit=max(1, min(args.lines, 5000)))
    finally:
        client.close()
    records = page.get("records") or []
    export = page.get("export") or {}
    emit(
        args,
        {"records": records, "export": export},
        lambda data: "\n".join([*(format_record(r) for r in records), format_export(export)]),
    )
    return 0


# --------------------------------------------------------------------------- verify


def _verify(args: argparse.Namespace, config: Config) -> int:
    pubkey = Path(args.pubkey) if args.pubkey else None
    if args.otlp_json:
        report = verify_otlp_json(Path(args.otlp_json), pubkey)
    else:
        report = verify_db(Path(args.db) if args.db else config.db_path, pubkey)
    emit(args, report.to_dict(), lambda _data: report.text())
    return 0 if report.ok else EXIT_ERROR
