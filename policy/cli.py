"""``openbus-policy``: the org admin's and box operator's command for the org policy.

    openbus-policy keygen PRIVATE_KEY PUBLIC_KEY
    openbus-policy sign POLICY --key PRIVATE_KEY          (writes POLICY.sig)
    openbus-policy verify POLICY --pubkey PUBLIC_KEY      (exit 0 only when valid)
    openbus-policy show POLICY [--pubkey PUBLIC_KEY] [--json]
    openbus-policy explain USER --policy POLICY --pubkey PUBLIC_KEY [--json]

``--pubkey`` may be given more than once (a key ring during rotation). Errors print one line
naming the file and exit non-zero; no traceback reaches the user, no key material is printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openbus.kernel.errors import OpenbusError
from openbus.kernel.limits import BUILTIN_MAXIMA
from openbus.policy.accounts import UnknownUser, groups_of
from openbus.policy.model import Policy, explain_text
from openbus.policy.schema import parse_policy
from openbus.policy.signing import (
    load_private_key,
    load_public_keys,
    signature_path,
    verify_file,
    write_keypair,
    write_signature,
)

PROG = "openbus-policy"
EXIT_ERROR = 1


class CliError(Exception):
    pass


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror}") from None


def _verified(policy: Path, pubkeys: Sequence[Path]) -> tuple[Policy, str]:
    verified = verify_file(policy, load_public_keys(pubkeys))
    return parse_policy(verified.data, str(policy)), verified.key_id


# --------------------------------------------------------------------------- verbs


def _keygen(args: argparse.Namespace) -> int:
    kid = write_keypair(Path(args.private_key), Path(args.public_key))
    print(f"wrote {args.private_key} (private, mode 0600) and {args.public_key} (public), {kid}")
    return 0


def _sign(args: argparse.Namespace) -> int:
    path = Path(args.policy)
    data = _read(path)
    policy = parse_policy(data, str(path))  # never sign something the daemon would refuse
    target = write_signature(path, data, load_private_key(Path(args.key)))
    print(f"signed {path} (org {policy.org}, version {policy.version}): wrote {target}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    path = Path(args.policy)
    policy, kid = _verified(path, [Path(p) for p in args.pubkey])
    if args.json:
        _print_json({"valid": True, "org": policy.org, "version": policy.version, "key_id": kid})
    else:
        print(f"{path}: valid (org {policy.org}, version {policy.version}, signed by {kid})")
    return 0


def _show_text(policy: Policy, signature: str) -> str:
    data = policy.to_dict()
    caps = data["caps"]
    out = [
        f"org:       {policy.org}",
        f"version:   {policy.version}",
        f"issued:    {data['issued']}",
        f"signature: {signature}",
        f"caps:      default {caps['default']}",
    ]
    out += [f"           user {k}: {v}" for k, v in caps["users"].items()]
    out += [f"           group {k}: {v}" for k, v in caps["groups"].items()]
    harnesses = data["harnesses"]
    out.append(f"harnesses: {', '.join(harnesses) if harnesses is not None else 'all'}")
    audit = policy.audit
    export = "required" if audit.required else "optional"
    target = f"{audit.endpoint} ({audit.protocol})" if audit.endpoint else "no endpoint"
    out.append(f"audit:     export {export}, {target}")
    if audit.credential_file:
        out.append(f"           credential file {audit.credential_file}")
    for box, prints in sorted(audit.key_fingerprints.items()):
        out += [f"           audit key of {box}: {p}" for p in sorted(prints)]
    out.append("limits:")
    for name, value in policy.limits.as_dict().items():
        builtin = BUILTIN_MAXIMA[name]
        note = f" (built-in {builtin})" if value < builtin else " (built-in maximum)"
        out.append(f"           {name} = {value}{note}")
    out.append(
        f"hosted:    connect_default {policy.hosted.connect_default.value}, "
        f"control {policy.hosted.control}"
    )
    return "\n".join(out)


def _show(args: argparse.Namespace) -> int:
    path = Path(args.policy)
    if args.pubkey:
        policy, kid = _verified(path, [Path(p) for p in args.pubkey])
        signature = f"valid, signed by {kid}"
    else:
        policy = parse_policy(_read(path), str(path))
        state = "present" if signature_path(path).exists() else "missing"
        signature = f"not checked ({state}; pass --pubkey to verify)"
    if args.json:
        _print_json(dict(policy.to_dict(), signature=signature))
    else:
        print(_show_text(policy, signature))
    return 0


def _explain(args: argparse.Namespace) -> int:
    path = Path(args.policy)
    policy, kid = _verified(path, [Path(p) for p in args.pubkey])
    try:
        groups = groups_of(args.user)
        note = None
    except UnknownUser:
        groups = ()
        note = f"{args.user} is not a user on this box: no groups apply"
    decision = policy.effective_cap(args.user, groups)
    source = f"{path}: org {policy.org}, version {policy.version}, signed by {kid}"
    if args.json:
        body = decision.to_dict()
        body["policy"] = {"file": str(path), "org": policy.org, "version": policy.version}
        body["policy"]["key_id"] = kid
        body["known_user"] = note is None
        _print_json(body)
    else:
        print(explain_text(decision))
        if note:
            print(f"note:   {note}")
        print(f"policy: {source}")
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Sign, check and explain the org policy."
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True

    p = sub.add_parser("keygen", help="make an Ed25519 key pair (refuses to overwrite)")
    p.add_argument("private_key", metavar="PRIVATE_KEY")
    p.add_argument("public_key", metavar="PUBLIC_KEY")
    p.set_defaults(handler=_keygen)

    p = sub.add_parser("sign", help="validate POLICY and write POLICY.sig")
    p.add_argument("policy", metavar="POLICY")
    p.add_argument("--key", required=True, metavar="PRIVATE_KEY")
    p.set_defaults(handler=_sign)

    p = sub.add_parser("verify", help="exit 0 only when POLICY is validly signed and valid")
    p.add_argument("policy", metavar="POLICY")
    p.add_argument("--pubkey", required=True, action="append", metavar="PUBLIC_KEY")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_verify)

    p = sub.add_parser("show", help="print what POLICY says")
    p.add_argument("policy", metavar="POLICY")
    p.add_argument("--pubkey", action="append", metavar="PUBLIC_KEY", help="also verify")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_show)

    p = sub.add_parser("explain", help="the cap USER may grant, from which rule, and why")
    p.add_argument("user", metavar="USER")
    p.add_argument("--policy", required=True, metavar="POLICY")
    p.add_argument("--pubkey", required=True, action="append", metavar="PUBLIC_KEY")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_explain)
    return parser


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
        return code
    except OpenbusError as exc:
        print(f"{PROG}: {_one_line(exc.message)}", file=sys.stderr)
    except CliError as exc:
        print(f"{PROG}: {_one_line(str(exc))}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
