"""A real OTLP logs receiver for tests: gRPC (the proto's LogsService) or HTTP/protobuf.

It writes what it receives as the OpenTelemetry Collector's ``file`` exporter does: one
OTLP JSON line per export request, so ``openbus audit verify --otlp-json`` can check it.
It can be stopped and restarted on the same port (an outage), and keeps the set of
``openbus.seq`` values it received for quick assertions.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

from tests.support.daemon import free_port


class OtlpReceiver:
    def __init__(self, protocol: str, out: Path, port: int | None = None) -> None:
        if protocol not in ("grpc", "http/protobuf"):
            raise ValueError(f"unknown protocol {protocol!r}")
        self.protocol = protocol
        self.out = out
        self.port = port or free_port()
        self.requests = 0
        self.record_seqs: list[int] = []  # every received copy, duplicates included
        self.checkpoint_seqs: list[int] = []
        self.resources: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._grpc is not None or self._http is not None

    def start(self) -> OtlpReceiver:
        if self.running:
            return self
        if self.protocol == "grpc":
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_Servicer(self), server)
            bound = server.add_insecure_port(f"127.0.0.1:{self.port}")
            if bound != self.port:
                raise RuntimeError(f"could not bind 127.0.0.1:{self.port}")
            server.start()
            self._grpc = server
        else:
            receiver = self

            class Handler(_HttpHandler):
                owner = receiver

            ThreadingHTTPServer.allow_reuse_address = True
            httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
            httpd.daemon_threads = True
            thread = threading.Thread(target=httpd.serve_forever, name="otlp-http", daemon=True)
            thread.start()
            self._http, self._http_thread = httpd, thread
        return self

    def stop(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=None).wait(5)
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            if self._http_thread is not None:
                self._http_thread.join(5)
            self._http = None
            self._http_thread = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ receiving

    def receive(self, request: Any, headers: dict[str, str]) -> None:
        line = MessageToJson(request, indent=None)
        records: list[int] = []
        checkpoints: list[int] = []
        resources: list[dict[str, Any]] = []
        for resource_logs in request.resource_logs:
            resources.append(
                {a.key: a.value.string_value for a in resource_logs.resource.attributes}
            )
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    attrs = {a.key: a.value for a in record.attributes}
                    kind = attrs["openbus.kind"].string_value if "openbus.kind" in attrs else ""
                    seq = attrs["openbus.seq"].int_value if "openbus.seq" in attrs else -1
                    (records if kind == "record" else checkpoints).append(seq)
        with self._lock:
            with self.out.open("a", encoding="utf-8") as out:
                out.write(line.replace("\n", "") + "\n")
            self.requests += 1
            self.record_seqs.extend(records)
            self.checkpoint_seqs.extend(checkpoints)
            self.resources.extend(resources)
            self.headers_seen.append(headers)

    def distinct_seqs(self) -> set[int]:
        with self._lock:
            return set(self.record_seqs)

    def has_all(self, upto: int) -> bool:
        """Every record seq 1..upto has arrived at least once."""
        return self.distinct_seqs() >= set(range(1, upto + 1))


class _Servicer(logs_service_pb2_grpc.LogsServiceServicer):  # type: ignore[misc]
    def __init__(self, owner: OtlpReceiver) -> None:
        self.owner = owner

    def Export(self, request: Any, context: Any) -> Any:
        headers = {k: v for k, v in context.invocation_metadata()}
        self.owner.receive(request, headers)
        return logs_service_pb2.ExportLogsServiceResponse()


class _HttpHandler(BaseHTTPRequestHandler):
    owner: OtlpReceiver

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path != "/v1/logs":
            self.send_response(404)
            self.end_headers()
            return
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        request = logs_service_pb2.ExportLogsServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception:
            self.send_response(400)
            self.end_headers()
            return
        self.owner.receive(request, {k.lower(): v for k, v in self.headers.items()})
        payload = logs_service_pb2.ExportLogsServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
