"""/generate_stream's answer: server-sent events in TGI's shape, one per generated token, the last carrying the
whole text. The request was checked whole before (serving.validate); its headers wait for its first token,
so that what the model refuses as it starts on the input is a 4xx as on /generate, never a 200 whose only
event is the refusal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable

import anyio
import torch
from fastapi import Request
from fastapi.responses import StreamingResponse

from encdec.errors import EncdecError
from encdec.serving.scheduler import Abandoned
from encdec.serving.validate import Checked

log = logging.getLogger(__name__)


async def watch_client(request: Request, gone: threading.Event, wake: Callable[[], None]) -> None:
    """Set `gone` (and wake the scheduler) once the client of `request`, whose body was read, disconnects."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    gone.set()
    wake()


class TokenStream:
    """A /generate_stream request: its generation started at once, in a thread; its events (each generated
    token as it is chosen, then the whole text) sent by the response. The place the request holds is given
    back when that thread ends; a client gone (before its first token, the response closed early, or never
    sent) stops the generation at the next step."""

    def __init__(self, server, checked: Checked):  # server: serving.app's Server
        self.server, self.checked = server, checked
        self.gone = threading.Event()
        self.queue: asyncio.Queue = asyncio.Queue()  # token tensors, then the answer or an exception
        self.head = None  # the first item, taken before the headers
        self.started = time.perf_counter()
        loop = asyncio.get_running_loop()
        self.task = asyncio.create_task(
            self.run(lambda tokens: loop.call_soon_threadsafe(self.queue.put_nowait, tokens))
        )
        self.task.add_done_callback(lambda _: server.release(1))

    async def first(self, request: Request) -> None:
        """Wait for the first token (or the answer), watching the client meanwhile; a refusal or a client gone
        before it is raised here, before any byte of the answer."""
        watcher = asyncio.create_task(watch_client(request, self.gone, self.server.scheduler.wake))
        try:
            self.head = await self.queue.get()
        except BaseException:
            self.close()
            raise
        finally:
            watcher.cancel()
        if isinstance(self.head, Exception):
            raise self.head

    def response(self) -> StreamingResponse:
        return ClosingStream(self.events(), self.close, media_type="text/event-stream")

    def close(self) -> None:
        if not self.task.done():
            self.gone.set()
            self.server.scheduler.wake()
            self.server.metrics.requests.labels("/generate_stream", "499").inc()

    async def run(self, on_tokens: Callable[[torch.Tensor], None]) -> None:
        server, checked = self.server, self.checked
        try:
            answer = await anyio.to_thread.run_sync(
                server.generate_one, checked, checked.inputs[0], on_tokens, self.gone, limiter=server.limiter
            )
        except Exception as error:  # raised before the headers, else the stream's last event
            await self.queue.put(error)
            return
        server.metrics.latency.observe(time.perf_counter() - self.started)
        await self.queue.put(answer)

    async def events(self):
        """TGI's stream: an event per token, {"index", "token": {id, text, special}, "generated_text": null}, the
        last token's carrying the whole text (and details where asked). Each token's event waits for the next
        token (one decoder step) so that the last one can carry it; an error after the headers is the last
        event, {"index", "token": null, "error"}."""
        server, eos = self.server, self.checked.eos
        ids: list[int] = []
        shown = ""
        pending = None  # the newest token's event, sent when the next token or the answer comes
        item, self.head = self.head, None
        while True:
            if item is None:
                item = await self.queue.get()
            if isinstance(item, dict | Exception):  # the answer, or the error that ended the generation
                answer = item if isinstance(item, dict) else {"error": self.failed(item)}
                status = "200" if "error" not in answer else "422" if isinstance(item, EncdecError) else "500"
                server.metrics.requests.labels("/generate_stream", status).inc()
                if pending is not None and "error" not in answer:
                    yield event({**pending, **answer})
                else:
                    if pending is not None:
                        yield event(pending)
                    yield event({"index": len(ids), "token": None, **answer})
                return
            token_id, item = int(item[0]), None
            if ids and ids[-1] in eos:
                continue  # the padding after EOS
            ids.append(token_id)
            text = server.generator.decode_tokens(ids)  # as `encdec generate` streams them
            piece, shown = text[len(shown) :], text
            if pending is not None:
                yield event(pending)
            pending = {"index": len(ids), "token": {"id": token_id, "text": piece, "special": token_id in eos}}
            pending["generated_text"] = None

    def failed(self, error: Exception) -> str:
        """The sentence an error after the headers is sent as: a refusal's own, else (a bug, logged with its
        traceback) the server's failure."""
        if isinstance(error, EncdecError | Abandoned):
            return str(error)
        log.error("a stream failed after its headers", exc_info=error)
        return f"the server failed on this request ({type(error).__name__})"


class ClosingStream(StreamingResponse):
    """A streaming response that calls `on_close` however it ends: sent whole, its client gone mid-stream
    (the send fails or the disconnect is heard), or cancelled before its first byte."""

    def __init__(self, content, on_close: Callable[[], None], **kwargs):
        super().__init__(content, **kwargs)
        self.on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


def event(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
