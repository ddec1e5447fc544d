"""Org policy: a signed TOML document that caps what may be granted on a box.

``schema`` parses and validates the file (every error names its field and line), ``signing``
makes and checks the detached Ed25519 signature, ``model`` answers "what may this user grant,
from which rule, and why" without I/O, ``loader`` loads, verifies and reloads it (refusing
rollbacks), and ``cli`` is the ``openbus-policy`` admin command.
"""
