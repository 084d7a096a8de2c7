"""Serving the simulator: in the foreground for the CLI, or on a background thread in-process."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ._app import SHUTTING_DOWN, Simulator, SimulatorStats
from ._config import SimulatorConfig

_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 10.0
# Requests still running when the server is told to stop (say, in a long simulated prefill for a
# client that is gone) are cancelled after this long.
_GRACEFUL_STOP_S = 1


def _raw_response(status: str, body: bytes = b"") -> bytes:
    """Returns a whole HTTP/1.1 response that closes the connection, for writing past h11."""
    head = f"HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
    if body:
        head += "Content-Type: application/json\r\n"
    return head.encode() + b"\r\n" + body


_REQUEST_TIMEOUT = _raw_response("408 Request Timeout")
_SHUTTING_DOWN_MID_BODY = _raw_response(
    "503 Service Unavailable", json.dumps(SHUTTING_DOWN.body(), separators=(",", ":")).encode()
)


def _request_timed_protocol(timeout_s: float) -> type[H11Protocol]:
    """Returns uvicorn's HTTP/1.1 protocol with a deadline on every request, head and body.

    uvicorn times out idle keep-alive connections, but not a client that sends its request
    slowly, or not at all: a request line, headers or a body trickled a byte at a time would
    hold the connection forever. The deadline runs from the connection's start, and again from
    the end of each answer, until the next request is complete, body included; a client that
    misses it gets a 408 and is disconnected. The time to answer a complete request is not
    counted. A server told to stop answers a request whose body is still arriving at once, with
    a 503, where waiting for the body would end in a cancelled task and uvicorn's traceback.
    """

    class RequestTimedH11Protocol(H11Protocol):
        _request_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_request()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_request()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._request_timer is not None:
                self._request_timer.cancel()
            super().connection_lost(exc)

        def shutdown(self) -> None:
            if self._receiving_body():
                self._refuse(_SHUTTING_DOWN_MID_BODY)
            super().shutdown()

        def _await_request(self) -> None:
            if self._request_timer is not None:
                self._request_timer.cancel()
            self._request_timer = self.loop.call_later(timeout_s, self._request_overdue, self.cycle)

        def _receiving_body(self) -> bool:
            """Whether a request's head has come and its body is still coming, unanswered."""
            cycle = self.cycle
            return cycle is not None and cycle.more_body and not cycle.response_started

        def _request_overdue(self, cycle_when_armed: object) -> None:
            # A new head since then started a new cycle; a pipelined one may still be running.
            waiting_for_head = self.cycle is cycle_when_armed and (
                self.cycle is None or self.cycle.response_complete
            )
            if waiting_for_head or self._receiving_body():
                self._refuse(_REQUEST_TIMEOUT)

        def _refuse(self, response: bytes) -> None:
            # The request's task, if any, sees its client disconnect and answers no one.
            if not self.transport.is_closing():
                self.transport.write(response)
                self.transport.close()

    return RequestTimedH11Protocol


class _SimulatorServer(uvicorn.Server):
    """uvicorn's server, which ends the simulator's requests in progress when it stops."""

    def __init__(self, simulator: Simulator, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._simulator = simulator
        self.interrupted = False
        """Whether Ctrl-C (SIGINT) stopped it."""
        self.on_started: Callable[[], object] | None = None
        """Called once it accepts requests, its Ctrl-C handler in place."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn raises the signal again once it has stopped, but asyncio's own SIGINT handler
        # can take it while the loop winds down, and the process then exits 0 or 130 by a race.
        self.interrupted = self.interrupted or sig == signal.SIGINT
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._simulator.sleeper.restart()
        await super().startup(sockets)
        if self.on_started is not None and self.started:
            self.on_started()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._simulator.sleeper.stop()
        await super().shutdown(sockets)


def _server(simulator: Simulator, **options: object) -> _SimulatorServer:
    """Returns the uvicorn server of ``simulator``; ``options`` go to ``uvicorn.Config``."""
    config = uvicorn.Config(
        simulator.app,
        http=_request_timed_protocol(simulator.config.header_timeout_s),
        lifespan="off",  # the app has no startup or shutdown of its own
        timeout_graceful_shutdown=_GRACEFUL_STOP_S,
        **options,  # type: ignore[arg-type]
    )
    return _SimulatorServer(simulator, config)


def _bind(host: str, port: int) -> socket.socket:
    """Binds ``host:port`` (0: a free port) so that a failure is an ``OSError`` here."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
    except OSError:
        listener.close()
        raise
    return listener


def _base_url(host: str, port: int) -> str:
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/v1"


def run_simulator(
    config: SimulatorConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    log_level: str = "info",
    on_listening: Callable[[str], object] | None = None,
) -> None:
    """Serves the simulator until interrupted (Ctrl+C); binds only ``host``.

    Args:
        config: How the server behaves; ``None`` uses the defaults.
        host: The one address to listen on.
        port: The port to listen on; 0 picks a free one.
        log_level: uvicorn's log level.
        on_listening: Called with the API root once it accepts requests.

    Raises:
        OSError: When the address cannot be bound (in use, not local, unknown host).
        ValueError: When the configuration's tokenizer cannot be used.
    """
    simulator = Simulator(config or SimulatorConfig())  # a bad option fails before binding
    listener = _bind(host, port)
    url = _base_url(host, listener.getsockname()[1])
    try:
        server = _server(simulator, log_level=log_level)
        if on_listening is not None:
            # Said once it serves: a Ctrl-C before uvicorn's own handler was in place could be
            # taken by asyncio's, which cancelled the startup and left it serving, deaf to it.
            server.on_started = lambda: on_listening(url)
        server.run(sockets=[listener])
    finally:
        listener.close()
    if server.interrupted:
        raise KeyboardInterrupt


class RunningSimulator:
    """A simulator served by uvicorn on a background thread; a sync and async context manager.

    Entering starts the server (on a free port unless one is given) and returns this object;
    leaving stops it. Create it with :func:`running_simulator`. The server shares the process,
    and so the GIL, with its caller: a caller that keeps the CPU busy (say, parsing thousands of
    concurrent streams) delays the schedule; for exact timing under such load, run
    ``agent-latency sim`` in another process.

    Args:
        config: How the server behaves; ``None`` uses the defaults.
        host: The one address to listen on.
        port: The port; 0 picks a free one.
    """

    def __init__(
        self, config: SimulatorConfig | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.config = config or SimulatorConfig()
        self.host = host
        self._requested_port = port
        self._simulator = Simulator(self.config)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    def __repr__(self) -> str:
        state = f"serving at {self.base_url}" if self._port is not None else "stopped"
        return f"RunningSimulator({state})"

    @property
    def port(self) -> int:
        """The port listened on."""
        if self._port is None:
            raise RuntimeError("RunningSimulator: not started; use it in a with statement.")
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI API root to give clients, e.g. ``http://127.0.0.1:43121/v1``."""
        return _base_url(self.host, self.port)

    @property
    def stats(self) -> SimulatorStats:
        """Requests served, prompt tokens, cached prompt tokens reused, and so on, so far."""
        return self._simulator.stats()

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """The headers of the latest chat requests, oldest first, credentials left out."""
        return self._simulator.request_headers()

    def start(self) -> RunningSimulator:
        """Binds the address, starts serving and waits until requests are accepted.

        Raises:
            RuntimeError: When already started or when the server fails to start.
            OSError: When the address cannot be bound.
        """
        if self._thread is not None:
            raise RuntimeError("RunningSimulator: already started.")
        listener = _bind(self.host, self._requested_port)
        server = _server(
            self._simulator,
            log_config=None,  # leave the host application's logging alone
            log_level="warning",
            access_log=False,
        )
        thread = threading.Thread(
            target=server.run,
            kwargs={"sockets": [listener]},
            name="agent-latency-sim",
            daemon=True,
        )
        thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                listener.close()
                raise RuntimeError("RunningSimulator: the server did not start; see the log.")
            time.sleep(0.005)
        self._server, self._thread = server, thread
        self._port = listener.getsockname()[1]
        return self

    def stop(self) -> None:
        """Stops serving and waits for the server thread; a no-op when not running."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(_STOP_TIMEOUT_S)
        self._server = self._thread = None
        self._port = None

    def __enter__(self) -> RunningSimulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> RunningSimulator:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)


def running_simulator(
    config: SimulatorConfig | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> RunningSimulator:
    """Returns a simulator to serve for the length of a ``with`` (or ``async with``) block.

    Example:
        >>> with running_simulator(SimulatorConfig(overhead_ms=50)) as sim:  # doctest: +SKIP
        ...     ChatOpenAI(base_url=sim.base_url, api_key="unused", model=sim.config.models[0])

    Args:
        config: How the server behaves; ``None`` uses the defaults.
        host: The one address to listen on.
        port: The port; 0 picks a free one.
    """
    return RunningSimulator(config, host=host, port=port)
