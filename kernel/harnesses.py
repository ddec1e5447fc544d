"""The names every part of openbus agrees on: harnesses, and the OTLP protocols."""

from __future__ import annotations

HARNESSES = ("claude", "codex", "opencode", "omp", "gemini", "shell", "unknown")
OTLP_PROTOCOLS = ("grpc", "http/protobuf")
