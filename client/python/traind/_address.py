"""Where traind is and how to authenticate: trainctl's rules."""

from __future__ import annotations

import os
import stat
from typing import Mapping, Optional

DEFAULT_TCP_ADDRESS = "127.0.0.1:7070"


def default_address(env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> str:
    """$TRAIND_ADDRESS if set; else unix:$TRAIND_STATE_DIR/traind.sock if
    TRAIND_STATE_DIR is set; else unix:.traind/traind.sock if that socket
    exists (traind's default state directory, relative to the current
    directory); else 127.0.0.1:7070."""
    env = os.environ if env is None else env
    address = env.get("TRAIND_ADDRESS", "")
    if address:
        return address
    state_dir = env.get("TRAIND_STATE_DIR", "")
    if state_dir:
        return f"unix:{state_dir}/traind.sock"
    socket_path = os.path.join(cwd or ".", ".traind", "traind.sock")
    try:
        if stat.S_ISSOCK(os.stat(socket_path).st_mode):
            return "unix:.traind/traind.sock"
    except OSError:
        pass
    return DEFAULT_TCP_ADDRESS


def check_address(address: str) -> str:
    """`address` if it is unix:PATH or HOST:PORT (any gRPC target); else
    ValueError."""
    if not address or ":" not in address or address == "unix:":
        raise ValueError(f"address {address!r}: expected unix:PATH or HOST:PORT")
    return address


def is_unix(address: str) -> bool:
    return address.startswith("unix:") or address.startswith("unix-abstract:")


def resolve_token(token: Optional[str], token_file: Optional[str],
                  env: Optional[Mapping[str, str]] = None) -> str:
    """token, else the first line of token_file, else $TRAIND_TOKEN; stripped.
    Empty: none (the unix socket needs none)."""
    env = os.environ if env is None else env
    if not token and token_file:
        with open(token_file, encoding="utf-8") as f:
            token = f.readline()
    if not token:
        token = env.get("TRAIND_TOKEN", "")
    return (token or "").strip()
