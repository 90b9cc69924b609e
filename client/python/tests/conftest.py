"""A real traind on a temporary state directory, for the client's tests.

Environment (set by ctest, see client/python/CMakeLists.txt):
  TRAIND_BIN_DIR     where traind and traind-worker are (default: build/bin)
  TRAIND_SOURCE_DIR  the source tree (examples/), default: three levels up

Every traind started here is stopped by its PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import traind

SOURCE_DIR = os.environ.get("TRAIND_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN_DIR = os.environ.get("TRAIND_BIN_DIR") or os.path.join(SOURCE_DIR, "build", "bin")


class Daemon:
    """One traind process: unix socket plus a loopback TCP port (token auth)."""

    def __init__(self, state_dir: str, args=()):
        self.state_dir = state_dir
        self.socket = os.path.join(state_dir, "traind.sock")
        self.address = "unix:" + self.socket
        self.token = secrets.token_hex(32)
        self.args = list(args)
        self.proc = None
        self.tcp_address = None

    def start(self) -> None:
        os.makedirs(self.state_dir, exist_ok=True)
        tokens = os.path.join(self.state_dir, "..", "tokens.yaml")
        digest = hashlib.sha256(self.token.encode()).hexdigest()
        with open(tokens, "w") as f:
            f.write(f"tokens:\n  - {{name: pytest, role: submitter, sha256: {digest}}}\n")
        argv = [os.path.join(BIN_DIR, "traind"), f"--state-dir={self.state_dir}",
                f"--listen={self.address}", "--listen=127.0.0.1:0", f"--tokens-file={tokens}",
                f"--data-root={SOURCE_DIR}", "--data-root=/tmp", *self.args]
        log = open(os.path.join(self.state_dir, "traind.log"), "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"traind exited with {self.proc.returncode}:\n{self.log()}")
            if os.path.exists(self.socket):
                try:
                    with traind.Client(self.address, timeout=2) as c:
                        info = c.info()
                    self.tcp_address = next(a for a in info["listen_addresses"]
                                            if a.startswith("127.0.0.1:"))
                    return
                except traind.UnavailableError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"traind did not answer within 20 s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log(self) -> str:
        try:
            with open(os.path.join(self.state_dir, "traind.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def client(self, **kwargs) -> traind.Client:
        return traind.Client(self.address, **kwargs)


@pytest.fixture(scope="session")
def source_dir() -> str:
    return SOURCE_DIR


def _new_daemon(args):
    if not os.path.exists(os.path.join(BIN_DIR, "traind")):
        pytest.fail(f"no traind in {BIN_DIR} (build it, or set TRAIND_BIN_DIR)")
    # Short paths: a unix socket path must fit in 108 bytes.
    root = tempfile.mkdtemp(prefix="traind-py-", dir="/tmp")
    return root, Daemon(os.path.join(root, "state"), args)


@pytest.fixture(scope="module")
def daemon():
    root, d = _new_daemon(["--cpu-slots=2"])
    d.start()
    yield d
    d.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def fresh_daemon():
    """A daemon of its own, for tests that stop and restart it."""
    root, d = _new_daemon(["--cpu-slots=1"])
    yield d
    d.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def client(daemon):
    with daemon.client() as c:
        yield c
