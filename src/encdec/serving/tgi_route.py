"""TGI's `POST /`, as TGI answers it and huggingface_hub's InferenceClient.text_generation posts to it: the body
of /generate with TGI's parameters beside (serving.api_requests.parse_tgi) and `stream`. Without stream, the
answer is /generate's in a list (`[{"generated_text", "details"?}]`, details with TGI's per-token `tokens`
and `prefill`); with it, /generate_stream's events, each token with its log-probability (the client reads
one on every token).

    curl localhost:8000/ -d '{"inputs": "A man rides a bike.", "parameters": {"max_new_tokens": 20}}'
    InferenceClient("http://localhost:8000").text_generation("A man rides a bike.", details=True, stream=True)
"""

from __future__ import annotations

import anyio
from fastapi import FastAPI, Request

from encdec.serving.api_requests import parse_tgi, tgi_schema
from encdec.serving.token_stream import TokenStream
from encdec.serving.validate import check_parsed


def add_tgi_route(app: FastAPI, server) -> None:
    """`POST /` on `app`, sharing `server` (serving.app's Server)."""
    body = {"requestBody": {"required": True, "content": {"application/json": {"schema": tgi_schema()}}}}

    @app.post("/", openapi_extra=body)
    async def tgi(request: Request):
        raw = await server.read(request)
        asked, stream = await anyio.to_thread.run_sync(parse_tgi, raw, server.limits, server.defaults)
        checked = await anyio.to_thread.run_sync(
            check_parsed, asked, server.text, server.defaults, server.scheduler, stream, stream
        )
        if not stream:
            return await server.generate_all(request, checked, "/")  # a list, as TGI's `/` answers
        server.admit(1)
        tokens = TokenStream(server, checked, "/", scored=True)
        await tokens.first(request)  # what the model refuses as it starts is a 4xx too, before any byte
        return tokens.response()
