"""A real S3-compatible server for the tests: moto's standalone server, in its own process, on 127.0.0.1.

As a script it serves moto's S3 on a free port of 127.0.0.1 and prints ``PORT <n>`` once it listens;
``--throttle BYTES_PER_S`` slows the bodies of GET responses (so a test can kill the server mid-transfer) and
nothing else. ``S3Server`` starts and stops it from a test; every wait is bounded.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CHUNK = 64 << 10


def _throttled(app, rate: int):
    def wrapped(environ, start_response):
        body = app(environ, start_response)
        if environ.get("REQUEST_METHOD") != "GET":
            return body

        def slow():
            try:
                for part in body:
                    for i in range(0, len(part), CHUNK):
                        yield part[i:i + CHUNK]
                        time.sleep(min(CHUNK, len(part) - i) / rate)
            finally:
                close = getattr(body, "close", None)
                if close:
                    close()

        return slow()

    return wrapped


def serve(throttle: int | None) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    if throttle:
        app = _throttled(app, throttle)
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


class S3Server:
    """One moto server process; ``env`` is what a client needs (endpoint and dummy credentials)."""

    def __init__(self, throttle: int | None = None, log: Path | None = None):
        argv = [sys.executable, __file__] + (["--throttle", str(throttle)] if throttle else [])
        self.log = open(log or os.devnull, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, start_new_session=True)
        deadline = time.monotonic() + 60
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(b"PORT ") or self.proc.poll() is not None:
                break
        if not line.startswith(b"PORT "):
            self.kill()
            raise RuntimeError(f"moto server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    def bucket(self, name: str, public: bool = False) -> str:
        self.client().create_bucket(Bucket=name, **({"ACL": "public-read"} if public else {}))
        return name

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.log.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--throttle", type=int, default=None, help="bytes per second for GET response bodies")
    serve(ap.parse_args().throttle)
