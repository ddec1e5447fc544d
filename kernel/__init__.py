"""The shared kernel: what the daemon, the tunnel and the org-policy toolkit all use.

The one error hierarchy (``errors``), injected time and randomness (``clock``; test doubles
in ``testing``), scopes and presets (``scopes``), the org policy's limits (``limits``), the
names of harnesses (``harnesses``), the signed tunnel identity codec (``tunnel_signature``)
and the TOML reader (``toml``). It imports nothing else of openbus (import-linter checks it).
"""
