"""Token counting through the official SDKs (SPEC §21): Anthropic's `messages.count_tokens`,
OpenAI's `responses.input_tokens.count` and Google GenAI's `models.count_tokens`, answered by the
serving route's own count endpoint — natively, translated, on Bedrock and Vertex — in route order
with failover, never held or charged, and estimated (and marked so) only when no route can count.

The mock's count endpoints count a body as its bytes / 4 and refuse what the providers refuse
(Anthropic's count takes no `max_tokens`, OpenAI's no `stream`, Gemini's not both `contents` and
`generateContentRequest`, Bedrock's an InvokeModel body of its own version, Vertex's Anthropic count
its `anthropic_version`), so a count that reaches them in the wrong shape fails here.
"""

import json
import urllib.request

import anthropic
import pytest

from test_clouds import BEDROCK, CLAUDE, VERTEX, bedrock, converse, last_request, vertex
from test_sdks import GATEWAY, MOCK, Setup, call

MESSAGES = [{"role": "user", "content": "How many tokens is this sentence, counted by the route itself?"}]
CONTENTS = [{"role": "user", "parts": [{"text": "How many tokens is this sentence, counted by the route itself?"}]}]


def mock_count(s, i, path, body):
    """What route `i`'s mock counts for `body` sent to it directly (its count endpoint `path`), written
    compactly as the SDKs write it."""
    label, scenario = s.routes[i]
    data = json.dumps(body, separators=(",", ":")).encode()
    req = urllib.request.Request(f"{MOCK}/{label}/{scenario}{path}", data=data,
                                 method="POST", headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def raw_count(s, path, body, headers=None):
    """A count request through the gateway, as JSON: (status, body, headers)."""
    req = urllib.request.Request(GATEWAY + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", "authorization": f"Bearer {s.key}",
                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def untouched(s):
    """Nothing held or charged: the key's account still has its whole credit."""
    status, credits = call("GET", "/v1/credits", headers={"authorization": f"Bearer {s.key}"})
    assert status == 200, credits
    assert (credits["balance"], credits["held"]) == (10, 0), credits


def test_anthropics_sdk_counts_on_a_native_route_as_the_route_counts():
    s = Setup("messages", ["ok"])
    raw = s.anthropic().messages.with_raw_response.count_tokens(model=s.model, system="Be brief.", messages=MESSAGES)
    counted = raw.parse().input_tokens
    assert raw.headers["x-switchyard-route"] == "r0"
    assert s.seen(0) == 1
    own = mock_count(s, 0, "/messages/count_tokens", {"model": "up0", "system": "Be brief.", "messages": MESSAGES})
    assert counted == own["input_tokens"], (counted, own)
    untouched(s)


def test_openais_sdk_counts_on_a_native_route_as_the_route_counts():
    s = Setup("responses", ["ok"])
    counted = s.openai().responses.input_tokens.count(model=s.model, instructions="Be brief.", input="How many?")
    own = mock_count(s, 0, "/responses/input_tokens", {"model": "up0", "instructions": "Be brief.", "input": "How many?"})
    assert counted.object == "response.input_tokens"
    assert counted.input_tokens == own["input_tokens"], (counted, own)
    untouched(s)


def test_googles_sdk_counts_on_a_native_route_as_the_route_counts():
    s = Setup("gemini", ["ok"])
    counted = s.gemini().models.count_tokens(model=s.model, contents=CONTENTS)
    own = mock_count(s, 0, "/models/up0:countTokens",
                     {"generateContentRequest": {"model": "models/up0", "contents": CONTENTS}})
    assert counted.total_tokens == own["totalTokens"], (counted, own)
    untouched(s)


def test_a_count_fails_over_in_route_order():
    s = Setup("messages", ["status/503", "ok"])
    raw = s.anthropic().messages.with_raw_response.count_tokens(model=s.model, messages=MESSAGES)
    assert raw.parse().input_tokens > 0
    assert (raw.headers["x-switchyard-route"], raw.headers["x-switchyard-attempts"]) == ("r1", "2")
    assert (s.seen(0), s.seen(1)) == (1, 1)
    untouched(s)


def test_a_count_through_another_dialect_is_the_serving_routes_count_of_the_translated_request():
    # r0 speaks Chat Completions, which has no count: passed over without a request.
    s = Setup("messages", [("chat", "ok"), ("responses", "ok")])
    raw = s.anthropic().messages.with_raw_response.count_tokens(model=s.model, messages=MESSAGES)
    counted = raw.parse().input_tokens
    assert raw.headers["x-switchyard-route"] == "r1"
    assert s.seen(0) == 0
    sent = last_request(s, 1)
    assert sent["path"].endswith("/responses/input_tokens") and "max_output_tokens" not in sent["body"], sent
    native = mock_count(s, 1, "/messages/count_tokens", {"model": "up1", "messages": MESSAGES})["input_tokens"]
    # The translated request's structure differs from the client's: within half, plus a few tokens.
    assert abs(counted - native) <= native / 2 + 8, (counted, native)


def test_no_route_that_can_count_gives_a_marked_estimate():
    s = Setup("messages", [("chat", "ok")])
    status, body, headers = raw_count(s, "/v1/messages/count_tokens", {"model": s.model, "messages": MESSAGES})
    assert status == 200, body
    assert body["estimated"] is True and body["input_tokens"] > len(MESSAGES[0]["content"]) / 4, body
    assert headers["x-switchyard-route"] == "estimated"
    assert s.seen(0) == 0
    # Every route failing is no count either: estimated, not an error.
    s = Setup("responses", ["status/503"])
    counted = s.openai().responses.input_tokens.count(model=s.model, input="How many?")
    assert counted.input_tokens > 0 and counted.model_extra.get("estimated") is True, counted


def test_a_malformed_count_is_the_clients_400_in_its_dialect():
    s = Setup("messages", ["ok"])
    status, body, _ = raw_count(s, "/v1/messages/count_tokens", {"model": s.model})
    assert status == 400 and body["type"] == "error" and "messages" in body["error"]["message"], body
    with pytest.raises(anthropic.NotFoundError):
        s.anthropic().messages.count_tokens(model="no-such-model", messages=MESSAGES)
    g = Setup("gemini", ["ok"])
    both = {"contents": CONTENTS, "generateContentRequest": {"contents": CONTENTS}}
    status, body, _ = raw_count(g, f"/v1beta/models/{g.model}:countTokens", both)
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT", body
    assert (s.seen(0), g.seen(0)) == (0, 0)


@pytest.mark.parametrize("route,endpoint", [
    (bedrock("ok"), "/count-tokens"),
    (converse("ok"), "/count-tokens"),
    (vertex("ok"), "/publishers/anthropic/models/count-tokens:rawPredict"),
], ids=["bedrock-invoke", "bedrock-converse", "vertex-anthropic"])
def test_clouds_count_at_their_own_endpoints(route, endpoint):
    s = Setup("messages", [route])
    raw = s.anthropic().messages.with_raw_response.count_tokens(model=s.model, messages=MESSAGES)
    assert raw.parse().input_tokens > 0 and raw.headers["x-switchyard-route"] == "r0"
    assert last_request(s, 0)["path"].endswith(endpoint), last_request(s, 0)
    untouched(s)


def test_vertex_counts_a_gemini_client_by_count_tokens():
    s = Setup("gemini", [vertex("ok", api="gemini")])
    counted = s.gemini().models.count_tokens(model=s.model, contents=CONTENTS)
    assert counted.total_tokens > 0
    sent = last_request(s, 0)
    assert sent["path"].endswith(":countTokens") and sent["body"]["contents"] == CONTENTS, sent
