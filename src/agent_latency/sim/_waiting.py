"""How the simulator's requests wait: sleeps that end when the server stops, and answers that
are given up as soon as their client is gone.

Without them, a stopping server would wait for every simulated prefill to run its course (a
Ctrl-C that does nothing for seconds), and then cancel what is left, which uvicorn logs as a
traceback per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from starlette.requests import Request
from starlette.responses import Response

UNSENT = Response(status_code=499)
"""The answer to a client that is gone: never sent (nginx's 499, "client closed request")."""


class Stopping(Exception):
    """Raised in a request's wait when the server stops."""


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


class Sleeper:
    """Sleeps until event-loop deadlines; once stopped, every sleep raises :class:`Stopping`.

    Used from the server's event loop only.
    """

    def __init__(self) -> None:
        self._sleeping: set[asyncio.Future[None]] = set()
        self._stopped = False

    async def until(self, deadline: float) -> None:
        """Returns at ``deadline`` (event-loop time).

        Raises:
            Stopping: When the server stops, before or during the sleep.
        """
        if self._stopped:
            raise Stopping
        loop = asyncio.get_running_loop()
        delay = deadline - loop.time()
        if delay <= 0:
            return
        woken: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(delay, _wake, woken)
        self._sleeping.add(woken)
        try:
            await woken
        finally:
            timer.cancel()
            self._sleeping.discard(woken)

    def stop(self) -> None:
        """Ends every sleep, now and until :meth:`restart`, with :class:`Stopping`."""
        self._stopped = True
        for woken in self._sleeping:
            if not woken.done():
                woken.set_exception(Stopping())

    def restart(self) -> None:
        """Lets sleeps run their course again (the server serves again)."""
        self._stopped = False


async def _disconnected(request: Request) -> None:
    """Returns once the client of a request whose body was read has disconnected."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, answer: Awaitable[Response]) -> Response:
    """Returns ``answer``'s response, or :data:`UNSENT` as soon as the client disconnects.

    Like vLLM, which aborts a request whose client is gone, the simulator then stops working
    on it: it is not counted as served and its prompt is not cached.
    """
    answering = asyncio.ensure_future(answer)
    watching = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait((answering, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        answering.cancel()  # no-op once done
        watching.cancel()
    return answering.result() if answering in done else UNSENT
