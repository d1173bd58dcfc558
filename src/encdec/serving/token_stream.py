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
from dataclasses import dataclass, field

import anyio
import torch
from fastapi import Request
from fastapi.responses import StreamingResponse

from encdec.errors import EncdecError
from encdec.serving.request_rows import SearchWatcher
from encdec.serving.scheduler import Abandoned
from encdec.serving.token_details import step_logprobs
from encdec.serving.validate import Checked

log = logging.getLogger(__name__)


async def watch_client(request: Request, gone: threading.Event, wake: Callable[[], None]) -> None:
    """Set `gone` (and wake the scheduler) once the client of `request`, whose body was read, disconnects."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    gone.set()
    wake()


@dataclass
class Streamed:
    """A token of a stream as it is chosen: its id, and where the stream is scored, its log-probability and the
    `top` likeliest alternatives (serving.token_details)."""

    id: int
    logprob: float | None = None
    top: list[tuple[int, float]] = field(default_factory=list)


class ScoredTokens(SearchWatcher):
    """The streamer of a scored stream: the scheduler hands it the request's search (`watch`), whose newest
    step's scores (kept by output_scores) give each token's log-probability as it comes."""

    def __init__(self, put: Callable[[Streamed], None], top: int = 0):
        self.put, self.top, self.search = put, top, None

    def watch(self, search) -> None:
        self.search = search

    def __call__(self, tokens: torch.Tensor) -> None:
        token = int(tokens[0])
        if self.search is None or not self.search.steps:  # a model served one request at a time: no scores
            self.put(Streamed(token))
            return
        self.put(Streamed(token, *step_logprobs(self.search.steps[-1][0], token, self.top)))


class TokenStream:
    """A streaming request (/generate_stream, TGI's `/` with stream, OpenAI's completions with stream): its
    generation started at once, in a thread; its tokens (each as it is chosen, `Streamed`), then the answer,
    sent by the response in its route's event shape (`events`: TGI's; serving.openai_routes: OpenAI's). The
    place the request holds is given back when that thread ends; a client gone (before its first token, the
    response closed early, or never sent) stops the generation at the next step. `scored`: each token with its
    log-probability and `top` alternatives (the request was checked with scored=True)."""

    def __init__(self, server, checked: Checked, path: str = "/generate_stream", scored: bool = False, top: int = 0):
        self.server, self.checked, self.path = server, checked, path
        self.gone = threading.Event()
        self.queue: asyncio.Queue = asyncio.Queue()  # Streamed tokens, then the answer or an exception
        self.head = None  # the first item, taken before the headers
        self.started = time.perf_counter()
        loop = asyncio.get_running_loop()
        put = lambda item: loop.call_soon_threadsafe(self.queue.put_nowait, item)  # noqa: E731
        self.streamer = ScoredTokens(put, top) if scored else lambda tokens: put(Streamed(int(tokens[0])))
        self.task = asyncio.create_task(self.run())
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

    def response(self, events=None) -> StreamingResponse:
        """The response sending `events` (an async iterator of texts; default TGI's, `events()`)."""
        return ClosingStream(events or self.events(), self.close, media_type="text/event-stream")

    def close(self) -> None:
        if not self.task.done():
            self.gone.set()
            self.server.scheduler.wake()
            self.server.metrics.requests.labels(self.path, "499").inc()

    async def run(self) -> None:
        server, checked = self.server, self.checked
        try:
            answer = await anyio.to_thread.run_sync(
                server.generate_one, checked, checked.inputs[0], self.streamer, self.gone, limiter=server.limiter
            )
        except Exception as error:  # raised before the headers, else the stream's last event
            await self.queue.put(error)
            return
        server.metrics.latency.observe(time.perf_counter() - self.started)
        await self.queue.put(answer)

    async def tokens(self):
        """(Streamed, its piece of the text, the whole text so far) for each generated token up to EOS, then
        (None, the answer or the error that ended the generation as a dict {"error"}, None), counted on
        /metrics. A piece is what the text adds to the text before it, as /generate_stream has always sent it."""
        eos, ids, shown = self.checked.eos, [], ""
        item, self.head = self.head, None
        while True:
            if item is None:
                item = await self.queue.get()
            if isinstance(item, dict | Exception):  # the answer, or the error that ended the generation
                answer = item if isinstance(item, dict) else {"error": self.failed(item)}
                status = "200" if "error" not in answer else "422" if isinstance(item, EncdecError) else "500"
                self.server.metrics.requests.labels(self.path, status).inc()
                yield None, answer, None
                return
            streamed, item = item, None
            if ids and ids[-1] in eos:
                continue  # the padding after EOS
            ids.append(streamed.id)
            text = self.server.generator.decode_tokens(ids)  # as `encdec generate` streams them
            piece, shown = text[len(shown) :], text
            yield streamed, piece, text

    async def events(self):
        """TGI's stream: an event per token, {"index", "token": {id, text, special (, logprob)}, "generated_text":
        null}, the last token's carrying the whole text (and details where asked). Each token's event waits for
        the next token (one decoder step) so that the last one can carry it; an error after the headers is the
        last event, {"index", "token": null, "error"}."""
        eos, index = self.checked.eos, 0
        pending = None  # the newest token's event, sent when the next token or the answer comes
        async for streamed, piece, _ in self.tokens():
            if streamed is None:
                answer = piece
                if pending is not None and "error" not in answer:
                    yield event({**pending, **answer})
                else:
                    if pending is not None:
                        yield event(pending)
                    yield event({"index": index, "token": None, **answer})
                return
            if pending is not None:
                yield event(pending)
            index += 1
            token = {"id": streamed.id, "text": piece, "special": streamed.id in eos}
            if isinstance(self.streamer, ScoredTokens):
                token["logprob"] = streamed.logprob
            pending = {"index": index, "token": token, "generated_text": None}

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
