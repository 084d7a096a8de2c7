"""A port of 127.0.0.1 that refuses connections, and stays refusing while tests run in parallel."""

from __future__ import annotations

import atexit
import socket


def refused_port() -> int:
    """Returns a port of 127.0.0.1 that refuses connections until the test process exits.

    The port is bound and never listened on: a connection is refused, and no server of this
    process or of another test worker can take the port meanwhile, as it could one only closed.
    """
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    atexit.register(holder.close)  # holds the socket open until then
    port: int = holder.getsockname()[1]
    return port
