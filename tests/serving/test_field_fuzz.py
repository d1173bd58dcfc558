"""Every field of every route, walked by enumeration against a real `encdec serve`: the routes and their request
bodies' fields are read from the server's own OpenAPI document (/openapi.json, made from the declarations
parse_body checks against), not from a list here, so a route or a field added later is walked too. Each field
in turn takes each hostile value (wrong types, huge and negative numbers, NaN and infinities, long strings,
deep and nested junk, unknown keys beside it) in an otherwise good request: the answer is a 2xx or a 4xx
with one JSON sentence, never a 5xx or a dropped connection, and the server logs no traceback."""

import json
import urllib.parse

import pytest
from server_kit import call, metric, serving, tiny_model_dir

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.slow

GOOD = {"inputs": "A man rides a bike.", "parameters": {"max_new_tokens": 4}}
GOOD_OF = {  # a route's good body; else GOOD, TGI's
    "/v1/completions": {"prompt": "A man rides a bike.", "max_tokens": 4},
    "/score": {"inputs": [{"source": "A man.", "target": "Ein Mann."}], "parameters": {"normalise": "gnmt"}},
}
DEEP = "DEEP-JUNK"  # stands for JSON nested deeper than any parser's recursion, written as raw text
HOSTILE = [  # and plausible ones, which reach the checks across fields (a sampling option without do_sample)
    0.5,
    1,
    2,
    "eng_Latn",
    None,
    True,
    False,
    0,
    -1,
    2**31,
    10**30,
    -(10**30),
    1e308,
    -1e-308,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    "x" * 100_000,
    "\u0000\ud800",
    "NaN",
    [],
    [None, {"a": [1.5, "b"]}],
    {"a": {"b": {"c": [None]}}},
    {"$ref": "#/"},
    [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]],
    DEEP,
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = tiny_model_dir(tmp_path_factory.mktemp("fields") / "t5")
    yield from serving(model, "--max-new-tokens", "20", absent=("Traceback", "ERROR"))


def routes(server) -> list[tuple[str, str, dict | None]]:
    """(path, method, request body schema or None) of every route the server declares."""
    status, document, _ = call(server.url + "/openapi.json")
    assert status == 200
    found = []
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            found.append((path, method.upper(), body))
    return found


def field_paths(schema: dict, at: tuple = ()) -> list[tuple]:
    """Every field a body of `schema` may hold, as a path of keys (an array's items as index 0), objects'
    own paths included; anyOf alternatives walked each."""
    paths = [at] if at else []
    for alternative in schema.get("anyOf", []):
        paths += [p for p in field_paths(alternative, at) if p != at]
    for name, inner in schema.get("properties", {}).items():
        paths += field_paths(inner, (*at, name))
    if "items" in schema:
        paths += field_paths(schema["items"], (*at, 0))
    return paths


def with_value(path: tuple, value, good: dict = GOOD) -> bytes:
    """`good` with the field at `path` set to `value` (the containers on the way made as the path needs)."""
    body = json.loads(json.dumps(good))
    holder = body
    for i, key in enumerate(path[:-1]):
        following = path[i + 1]
        if isinstance(key, int):
            holder = holder[0] if isinstance(holder, list) and holder else holder
            continue
        if not isinstance(holder.get(key), (dict, list)):
            holder[key] = [""] if isinstance(following, int) else {}
        holder = holder[key]
    last = path[-1]
    if isinstance(last, int):
        holder.clear()
        holder.append(value)
    else:
        holder[last] = value
    text = json.dumps(body)  # NaN and Infinity as Python writes them, as a careless client would
    return text.replace(json.dumps(DEEP), "[" * 100_000 + "]" * 100_000).encode()


def reach(body, path: tuple):
    """What `body` holds at `path` (None where it holds nothing there)."""
    for key in path:
        if not isinstance(body, dict | list) or (isinstance(body, dict) and key not in body):
            return None
        body = body[key] if isinstance(body, dict) else (body[0] if body else None)
    return body


STATUSES: dict[int, int] = {}


def check(status: int, answer, route: str) -> None:
    STATUSES[status] = STATUSES.get(status, 0) + 1
    assert status < 500, (route, answer)
    if status >= 400:
        assert isinstance(answer, dict) and set(answer) == {"error"}, answer
        sentence = answer["error"]
        if route.startswith("/v1/"):  # OpenAI's error object
            assert set(sentence) == {"message", "type", "param", "code"}, answer
            sentence = sentence["message"]
        assert "\n" not in sentence and len(sentence) < 400, answer


def test_the_walk_covers_every_declared_field_of_every_generating_route(server):
    declared = {path: body for path, _, body in routes(server) if body is not None}
    assert set(declared) == {"/generate", "/generate_stream", "/", "/v1/completions", "/score"}
    walked = field_paths(declared["/generate"])
    assert ("parameters", "top_k") in walked and ("parameters", "details") in walked and ("inputs", 0) in walked
    assert ("parameters", "best_of") in field_paths(declared["/"]) and ("stream",) in field_paths(declared["/"])
    assert {("prompt",), ("n",), ("logprobs",), ("stop",)} <= set(field_paths(declared["/v1/completions"]))
    scored = field_paths(declared["/score"])
    assert ("inputs", 0, "target") in scored and ("parameters", "alpha") in scored


def test_every_field_of_every_route_takes_every_hostile_value(server):
    requests = 0
    for route, method, schema in routes(server):
        if schema is None:  # a route without a body: junk queries and a junk body
            for value in HOSTILE:
                query = urllib.parse.urlencode({"x": str(value)[:1000], "inputs": "a"}, errors="surrogatepass")
                if method == "GET":
                    check(*call(f"{server.url}{route}?{query}")[:2], route)
                requests += 1
            continue
        good = GOOD_OF.get(route, GOOD)
        for path in field_paths(schema):
            for value in HOSTILE:
                check(*call(server.url + route, with_value(path, value, good))[:2], f"{route} {path} {value!r:.60}")
                requests += 1
        for path in [(), *(p for p in field_paths(schema) if isinstance(reach(good, p), dict))]:  # unknown keys
            body = json.loads(json.dumps(good))
            reach(body, path)["unknown_key"] = {"nested": [float("nan")]}
            check(*call(server.url + route, json.dumps(body).encode())[:2], f"{route} unknown key at {path}")
            requests += 1
    assert requests > 500 and STATUSES.get(200, 0) > 50  # every field and route walked; many good answers too
    assert call(server.url + "/health")[0] == 200 and metric(server.url, "encdec_queue_depth") == 0
    log = server.log()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]
