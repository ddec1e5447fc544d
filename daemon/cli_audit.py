"""``openbus audit tail [--json] [--follow]`` and ``openbus audit verify``.

``tail`` reads the daemon's audit trail over the human API (itself an audited read) and
shows the export lag; ``--follow`` keeps printing records as they are committed. Agents are
named as people read them (``claude "auth review" %10 on fix/login``, from the caller's
connections and the directory, read again when an agent not seen before appears), never by
session UUID; ``--json`` keeps each record exactly as the trail holds it. ``verify``
runs locally, without the daemon: on a state database (``--db``, default the configured
one) or on the JSON lines a collector's file exporter wrote (``--otlp-json``). It checks the
checkpoints against a pinned audit key only (``--pubkey``, or the org policy's
``[audit.key_fingerprints]`` with ``--policy`` and ``--org-key``, else the config's
``[policy]``); it prints what it proved, names the first bad record, and exits 1 when it found
one or could not verify the origin. ``key`` prints this box's audit key fingerprint, the line
an org admin pins in the policy.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openbus.daemon.audit.checkpoints import (
    PUBLIC_KEY_NAME,
    CheckpointPolicy,
    fingerprint,
    load_public_key,
)
from openbus.daemon.audit.verify import Pin, policy_pin, pubkey_pin, verify_db, verify_otlp_json
from openbus.daemon.cli_common import EXIT_ERROR, add_common, emit
from openbus.daemon.client import DaemonClient
from openbus.daemon.config import Config
from openbus.daemon.core.names import actor_harness, actor_pane, agent_name
from openbus.kernel.errors import BadRequest, OpenbusError

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
        "--pubkey", metavar="FILE", help="the box's audit public key (audit_key.pub), pinned"
    )
    verify.add_argument(
        "--policy",
        metavar="FILE",
        help="an org policy pinning the box's key in [audit.key_fingerprints] "
        "(default: the config's [policy])",
    )
    verify.add_argument(
        "--org-key", metavar="FILE", help="the org's public key that signed --policy"
    )
    verify.add_argument(
        "--checkpoint-every",
        type=_positive(int),
        metavar="N",
        help="the box's [audit] checkpoint_every (default: this config's)",
    )
    verify.add_argument(
        "--checkpoint-seconds",
        type=_positive(float),
        metavar="S",
        help="the box's [audit] checkpoint_seconds (default: this config's)",
    )
    verify.set_defaults(handler=_verify)

    key = verbs.add_parser("key", help="print this box's audit key fingerprint, to pin it")
    add_common(key)
    key.add_argument(
        "--pubkey", metavar="FILE", help="an audit public key file (default: the state dir's)"
    )
    key.set_defaults(handler=_key)


def _positive(kind: type[float]) -> Any:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
        return value

    return parse


# --------------------------------------------------------------------------- tail


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )


class ActorNames:
    """Agent actors as people read them, from the caller's connections and the directory.

    An actor first seen after the last read makes it read both again (once per actor), so a
    follower names agents connected after it started. What cannot be named is left as the
    trail wrote it, except an agent's session UUID: such an agent is no longer connected.
    """

    def __init__(self, client: DaemonClient) -> None:
        self.client = client
        self.names: dict[str, str] = {}
        self.tried: set[str] = set()

    def _read(self) -> None:
        try:
            connections = self.client.get("/api/connections") or {}
            panes = (self.client.get("/api/directory") or {}).get("panes") or []
        except OpenbusError:
            return
        by_pane = {p.get("pane"): p for p in panes if isinstance(p, dict)}
        for c in connections.get("connections") or []:
            pane = by_pane.get(c.get("pane")) or {}
            self.names[str(c.get("actor"))] = agent_name(
                c.get("harness"), pane.get("title"), c.get("pane"), pane.get("branch")
            )

    def __call__(self, actor: str) -> str:
        if not actor.startswith("agent:"):
            return actor
        if actor not in self.names and actor not in self.tried:
            self.tried.add(actor)
            self._read()
        if actor in self.names:
            return self.names[actor]
        pane = actor_pane(actor)
        name = agent_name(actor_harness(actor), None, pane, None)
        return name if pane else f"{name} (no longer connected)"


def format_record(record: dict[str, Any], name: Callable[[str], str]) -> str:
    parts = [
        f"{record['seq']:>8}",
        _when(float(record["time"])),
        name(str(record["actor"])),
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
    names = ActorNames(client)
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
                    sys.stdout.write(format_record(json.loads(line), names) + "\n")
                sys.stdout.flush()
            return 0
        page = client.get("/api/audit", after=after, limit=max(1, min(args.lines, 5000)))
        records = page.get("records") or []
        export = page.get("export") or {}
        lines = [] if args.json else [format_record(r, names) for r in records]
    finally:
        client.close()
    emit(
        args,
        {"records": records, "export": export},
        lambda data: "\n".join([*lines, format_export(export)]),
    )
    return 0


# --------------------------------------------------------------------------- verify


def pin_from_args(args: argparse.Namespace, config: Config) -> Pin | None:
    """The key(s) ``verify`` trusts: ``--pubkey``; or ``--policy`` with ``--org-key``; else the
    config's ``[policy] file`` and ``org_public_key`` when both are set; else none."""
    pubkey = Path(args.pubkey) if args.pubkey else None
    if args.org_key and not args.policy:
        raise BadRequest("--org-key is the key that signed --policy: pass both", field="--policy")
    if args.policy:
        if not args.org_key:
            raise BadRequest(
                "--policy needs --org-key FILE, the org's public key that signed it",
                field="--org-key",
            )
        return policy_pin(Path(args.policy), Path(args.org_key), pubkey=pubkey)
    if pubkey is not None:
        return pubkey_pin(pubkey)
    configured = config.policy
    if configured.file is not None and configured.org_public_key is not None:
        return policy_pin(
            configured.file,
            configured.org_public_key,
            via=f", from [policy] in {config.path}" if config.path else "",
        )
    return None


def _verify(args: argparse.Namespace, config: Config) -> int:
    pin = pin_from_args(args, config)
    cadence = CheckpointPolicy(
        args.checkpoint_every or config.audit.checkpoint_every,
        args.checkpoint_seconds or config.audit.checkpoint_seconds,
    )
    if args.otlp_json:
        report = verify_otlp_json(Path(args.otlp_json), pin, cadence)
    else:
        db = Path(args.db) if args.db else config.db_path
        report = verify_db(db, pin, cadence, now=time.time())
    emit(args, report.to_dict(), lambda _data: report.text())
    return 0 if report.ok else EXIT_ERROR


def _key(args: argparse.Namespace, config: Config) -> int:
    path = Path(args.pubkey) if args.pubkey else config.daemon.state_dir / PUBLIC_KEY_NAME
    box = config.audit.box_name or socket.gethostname()
    data = {"box": box, "fingerprint": fingerprint(load_public_key(path)), "file": str(path)}
    emit(
        args,
        data,
        lambda d: (
            f"{d['fingerprint']}  box {d['box']!r}  ({d['file']})\n"
            "pin it in the org policy:\n[audit.key_fingerprints]\n"
            f'{json.dumps(d["box"])} = "{d["fingerprint"]}"'
        ),
    )
    return 0
