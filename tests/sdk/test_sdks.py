"""The official SDKs against the real Worker (issues 10 and 17): OpenAI (chat, responses), Anthropic
(messages) and Google GenAI (Gemini), stream and non-stream, a failover case each, and a broken
stream each — where the SDK must raise (or report the error event) instead of returning a truncated
answer as a success.

Run by scripts/test after the Rust end-to-end suite, with the same stack (`wrangler dev` and the
mock upstream) and environment: SWITCHYARD_URL, MOCK_URL, ADMIN_TOKEN, E2E_UPSTREAM_KEY_NAME.
Each test adds its own providers, model and key through the admin API.
"""

import itertools
import json
import os
import time
import urllib.error
import urllib.request

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

GATEWAY = os.environ["SWITCHYARD_URL"]
MOCK = os.environ["MOCK_URL"]
ADMIN = os.environ["ADMIN_TOKEN"]
UPSTREAM_KEY_NAME = os.environ["E2E_UPSTREAM_KEY_NAME"]
POLICY = {"stream_first_content_ms": 400, "nonstream_base_ms": 400, "nonstream_per_20_tokens_ms": 0,
          "last_route_min_ms": 1500, "idle_timeout_ms": 700}
_counter = itertools.count()


def unique(prefix):
    return f"{prefix}-sdk-{os.getpid()}-{time.time_ns() % 10**12:x}-{next(_counter)}"


def call(method, path, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(GATEWAY + path, data=data, method=method,
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def admin(method, path, body=None):
    status, reply = call(method, path, body, {"authorization": f"Bearer {ADMIN}"})
    assert status in (200, 201), f"{method} {path}: {status} {reply}"
    return reply


class Cloud(tuple):
    """A route on a cloud provider (SPEC §20): its dialect, the mock scenario, the provider's fields
    (`path`: what follows the scenario in its base URL) and the route's upstream model."""

    def __new__(cls, api, scenario, fields, upstream_model):
        return super().__new__(cls, (api, scenario, dict(fields), upstream_model))


class Setup:
    """A model whose routes are mock scenarios speaking `api`, and a key with credit. A scenario
    may be an `(api, scenario)` pair for a route of another dialect, or a `Cloud` route."""

    def __init__(self, api, scenarios, policy=None):
        self.routes = []
        self._gemini = {}
        routes = []
        for i, scenario in enumerate(scenarios):
            if isinstance(scenario, Cloud):
                route_api, scenario, fields, upstream_model = scenario
            else:
                route_api, scenario = scenario if isinstance(scenario, tuple) else (api, scenario)
                auth = {"messages": "x-api-key", "gemini": "x-goog-api-key"}.get(route_api, "bearer")
                fields, upstream_model = {"auth": auth, "key_secret": UPSTREAM_KEY_NAME}, f"up{i}"
            label = unique("l")
            provider = unique("p")
            suffix = fields.pop("path", "")
            admin("PUT", f"/admin/providers/{provider}", {"base_url": f"{MOCK}/{label}/{scenario}{suffix}", **fields})
            routes.append({"id": f"r{i}", "provider": provider, "upstream_model": upstream_model, "apis": [route_api],
                           "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}})
            self.routes.append((label, scenario))
        self.model = unique("m")
        admin("PUT", f"/admin/models/{self.model}",
              {"context_window": 8192, "max_output_tokens": 1024, "routes": routes, "policy": {**POLICY, **(policy or {})}})
        account = admin("POST", "/admin/accounts", {})["id"]
        admin("POST", f"/admin/accounts/{account}/credit", {"amount_usd": 10})
        self.key = admin("POST", "/admin/keys", {"account_id": account})["key"]

    def openai(self):
        return openai.OpenAI(base_url=f"{GATEWAY}/v1", api_key=self.key, max_retries=0)

    def anthropic(self):
        return anthropic.Anthropic(base_url=GATEWAY, api_key=self.key, max_retries=0)

    def gemini(self, key=None):
        """A Google GenAI client for `key` (default: this setup's), kept alive with the setup: the
        SDK closes its connection pool when a client is dropped."""
        key = key or self.key
        if key not in self._gemini:
            options = genai_types.HttpOptions(base_url=GATEWAY, api_version="v1beta",
                                              retry_options=genai_types.HttpRetryOptions(attempts=1))
            self._gemini[key] = genai.Client(api_key=key, http_options=options)
        return self._gemini[key]

    def generation(self, generation_id):
        """The gateway's record of a request (written just after the answer: waits for it)."""
        for _ in range(100):
            status, g = call("GET", f"/v1/generation?id={generation_id}",
                             headers={"authorization": f"Bearer {self.key}"})
            if status == 200:
                return g
            time.sleep(0.05)
        raise AssertionError(f"generation {generation_id} never appeared")

    def attempts(self, generation_id):
        g = self.generation(generation_id)
        return [(a["route"], a["failure_class"] or a["outcome"]) for a in g["attempts"]]

    def seen(self, i):
        label, scenario = self.routes[i]
        with urllib.request.urlopen(f"{MOCK}/_stats/{label}/{scenario}", timeout=10) as r:
            return json.loads(r.read())["requests"]


FELL_BACK = [("r0", "upstream_5xx"), ("r1", "answered")]


# ---- OpenAI Chat Completions ---------------------------------------------------------------------

def test_chat_non_stream_fails_over():
    s = Setup("chat", ["status/503", "ok"])
    raw = s.openai().chat.completions.with_raw_response.create(
        model=s.model, messages=[{"role": "user", "content": "Say hello"}])
    completion = raw.parse()
    assert completion.choices[0].message.content.startswith("Hello")
    assert completion.model == "up1"
    assert s.attempts(raw.headers["x-generation-id"]) == FELL_BACK


def test_chat_stream_fails_over():
    s = Setup("chat", ["status/503", "ok"])
    with s.openai().chat.completions.with_streaming_response.create(
            model=s.model, messages=[{"role": "user", "content": "Say hello"}], stream=True) as raw:
        generation_id = raw.headers["x-generation-id"]
        chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Hello")
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert s.attempts(generation_id) == FELL_BACK


def test_chat_broken_stream_raises():
    s = Setup("chat", ["cut-after/2", "ok"])
    stream = s.openai().chat.completions.create(
        model=s.model, messages=[{"role": "user", "content": "Say hello"}], stream=True)
    received = []
    with pytest.raises(openai.APIError) as raised:
        for chunk in stream:
            received.extend(c.delta.content or "" for c in chunk.choices)
    assert "".join(received).startswith("Hello"), "content came before the cut"
    assert "broke" in str(raised.value)
    assert s.seen(1) == 0, "never a splice from another route"


def test_chat_errors_are_openai_errors():
    s = Setup("chat", ["status/500", "status/502"])
    with pytest.raises(openai.InternalServerError) as raised:
        s.openai().chat.completions.create(model=s.model, messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 502
    assert raised.value.code == "provider_error"
    with pytest.raises(openai.NotFoundError) as raised:
        s.openai().chat.completions.create(model="no/such-model", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.code == "model_not_found"


# ---- OpenAI Responses ----------------------------------------------------------------------------

def test_responses_non_stream_fails_over():
    s = Setup("responses", ["status/503", "ok"])
    raw = s.openai().responses.with_raw_response.create(model=s.model, input="Say hello")
    response = raw.parse()
    assert response.status == "completed"
    assert response.output_text.startswith("Hello")
    assert response.usage.output_tokens == 5
    assert s.attempts(raw.headers["x-generation-id"]) == FELL_BACK


def test_responses_stream_fails_over():
    s = Setup("responses", ["status/503", "ok"])
    with s.openai().responses.stream(model=s.model, input="Say hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas).startswith("Hello")
    assert final.status == "completed"
    assert final.output_text == "".join(deltas)
    assert (s.seen(0), s.seen(1)) == (1, 1)


def test_responses_broken_stream_reports_the_failure():
    s = Setup("responses", ["cut-after/2", "ok"])
    events = list(s.openai().responses.create(model=s.model, input="Say hello", stream=True))
    types = [e.type for e in events]
    assert "response.output_text.delta" in types, "content came before the cut"
    assert types[-1] == "response.failed", types
    assert "response.completed" not in types
    assert events[-1].response.error.message
    with pytest.raises(RuntimeError, match="response.completed"):
        with s.openai().responses.stream(model=s.model, input="Say hello") as stream:
            stream.get_final_response()
    assert s.seen(1) == 0, "never a splice from another route"


def test_responses_errors_are_openai_errors():
    s = Setup("responses", ["status/529/overloaded", "status/529/overloaded"])
    with pytest.raises(openai.APIStatusError) as raised:
        s.openai().responses.create(model=s.model, input="hi")
    assert raised.value.status_code == 503
    assert raised.value.code == "upstream_capacity_exhausted"
    with pytest.raises(openai.BadRequestError) as raised:
        s.openai().responses.create(model=s.model, input="")
    assert raised.value.param == "input"


# ---- Anthropic Messages --------------------------------------------------------------------------

MESSAGES = [{"role": "user", "content": "Say hello"}]


def test_messages_non_stream_fails_over():
    s = Setup("messages", ["status/503", "ok"])
    raw = s.anthropic().messages.with_raw_response.create(model=s.model, max_tokens=256, messages=MESSAGES)
    message = raw.parse()
    assert message.type == "message"
    assert message.content[0].text.startswith("Hello")
    assert message.usage.output_tokens == 5
    assert s.attempts(raw.headers["x-generation-id"]) == FELL_BACK


def test_messages_stream_fails_over():
    s = Setup("messages", ["error-event-first/overloaded", "ok"])
    with s.anthropic().messages.stream(model=s.model, max_tokens=256, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("Hello")
    assert final.stop_reason == "end_turn"
    assert final.content[0].text == text
    assert (s.seen(0), s.seen(1)) == (1, 1), "the overloaded event before content fell back"


def test_messages_broken_stream_raises():
    s = Setup("messages", ["cut-after/2", "ok"])
    received = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        with s.anthropic().messages.stream(model=s.model, max_tokens=256, messages=MESSAGES) as stream:
            for text in stream.text_stream:
                received.append(text)
    assert "".join(received).startswith("Hello"), "content came before the cut"
    assert "broke" in str(raised.value)
    assert s.seen(1) == 0, "never a splice from another route"


def test_messages_upstream_error_event_after_content_raises_it():
    s = Setup("messages", ["error-event-after/2/overloaded", "ok"])
    stream = s.anthropic().messages.create(model=s.model, max_tokens=256, messages=MESSAGES, stream=True)
    kinds = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        for event in stream:
            kinds.append(event.type)
    assert "content_block_delta" in kinds, "content came before the error"
    assert raised.value.body["error"]["type"] == "overloaded_error"


def test_messages_errors_are_anthropic_errors():
    s = Setup("messages", ["ok"])
    with pytest.raises(anthropic.NotFoundError) as raised:
        s.anthropic().messages.create(model="no/such-model", max_tokens=16, messages=MESSAGES)
    assert raised.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=GATEWAY, api_key="sk-sy-not-a-real-key", max_retries=0).messages.create(
            model=s.model, max_tokens=16, messages=MESSAGES)
    with pytest.raises(anthropic.BadRequestError) as raised:
        s.anthropic().messages.create(model=s.model, max_tokens=16, messages=[])
    assert raised.value.body["error"]["type"] == "invalid_request_error"


# ---- Google Gemini -------------------------------------------------------------------------------

def test_gemini_non_stream_fails_over():
    s = Setup("gemini", ["status/503", "ok"])
    response = s.gemini().models.generate_content(model=s.model, contents="Say hello")
    assert response.text.startswith("Hello")
    assert response.candidates[0].finish_reason == genai_types.FinishReason.STOP
    assert response.usage_metadata.candidates_token_count == 5
    assert response.model_version == "up1"
    assert (s.seen(0), s.seen(1)) == (1, 1)


def test_gemini_stream_fails_over():
    s = Setup("gemini", ["error-event-first/overloaded", "ok"])
    chunks = list(s.gemini().models.generate_content_stream(model=s.model, contents="Say hello"))
    text = "".join(c.text or "" for c in chunks)
    assert text.startswith("Hello")
    assert chunks[-1].candidates[0].finish_reason == genai_types.FinishReason.STOP
    assert chunks[-1].usage_metadata.candidates_token_count == 5
    assert (s.seen(0), s.seen(1)) == (1, 1), "the overloaded chunk before content fell back"


def test_gemini_broken_stream_raises():
    s = Setup("gemini", ["cut-after/2", "ok"])
    received = []
    with pytest.raises(genai_errors.APIError) as raised:
        for chunk in s.gemini().models.generate_content_stream(model=s.model, contents="Say hello"):
            received.append(chunk.text or "")
    assert "".join(received).startswith("Hello"), "content came before the cut"
    assert raised.value.code == 502
    assert raised.value.status == "UNAVAILABLE"
    assert "broke" in raised.value.message
    assert s.seen(1) == 0, "never a splice from another route"


def test_gemini_errors_are_google_errors():
    s = Setup("gemini", ["status/529/overloaded", "status/529/overloaded"])
    with pytest.raises(genai_errors.ServerError) as raised:
        s.gemini().models.generate_content(model=s.model, contents="hi")
    assert (raised.value.code, raised.value.status) == (503, "UNAVAILABLE")
    assert raised.value.details["error"]["details"][0]["reason"] == "upstream_capacity_exhausted"
    with pytest.raises(genai_errors.ClientError) as raised:
        s.gemini(key="sk-sy-not-a-real-key").models.generate_content(model=s.model, contents="hi")
    assert (raised.value.code, raised.value.status) == (401, "UNAUTHENTICATED")
    with pytest.raises(genai_errors.ClientError) as raised:
        s.gemini().models.generate_content(model="no-such-model", contents="hi")
    assert (raised.value.code, raised.value.status) == (404, "NOT_FOUND")
    # A key over its rate limit: 429 RESOURCE_EXHAUSTED, in the SDK's own error type.
    account = admin("POST", "/admin/accounts", {})["id"]
    admin("POST", f"/admin/accounts/{account}/credit", {"amount_usd": 1})
    limited = admin("POST", "/admin/keys", {"account_id": account, "rpm": 1})["key"]
    ok = Setup("gemini", ["ok"])
    ok.gemini(key=limited).models.generate_content(model=ok.model, contents="hi")
    with pytest.raises(genai_errors.ClientError) as raised:
        ok.gemini(key=limited).models.generate_content(model=ok.model, contents="hi")
    assert (raised.value.code, raised.value.status) == (429, "RESOURCE_EXHAUSTED")
    assert raised.value.details["error"]["details"][0]["reason"] == "key_rate_limited"


# ---- Responses over WebSocket (SPEC §21) ---------------------------------------------------------

def test_a_responses_websocket_is_refused_at_once_with_426():
    """OpenAI's WebSocket mode is not served: the upgrade is refused at once with 426 (so a client
    falls back to HTTP without waiting), and the same request over HTTP is answered."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    s = Setup("responses", ["ok"])
    url = GATEWAY.replace("http://", "ws://", 1) + "/v1/responses"
    started = time.monotonic()
    with pytest.raises(InvalidStatus) as refused:
        with connect(url, additional_headers={"authorization": f"Bearer {s.key}"}, open_timeout=10):
            pass
    assert time.monotonic() - started < 5
    response = refused.value.response
    assert response.status_code == 426, response
    body = json.loads(response.body)
    assert body["error"]["code"] == "websocket_unsupported", body
    answer = s.openai().responses.create(model=s.model, input="Say hello")
    assert answer.output_text.startswith("Hello")


# ---- Responses namespace tools (SPEC §21) --------------------------------------------------------

NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
             "tools": [{"type": "function", "name": "spawn_agent", "description": "Start one",
                        "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}]}


def test_a_namespace_of_the_clients_own_tools_is_forwarded_natively():
    """Codex sends a `namespace` tool (a client-side group of function tools) with every request:
    it is the client's own, so a Responses route gets it as sent — not refused as a tool the
    provider runs and bills."""
    s = Setup("responses", ["ok"])
    raw = s.openai().responses.with_raw_response.create(model=s.model, input="Say hello", tools=[NAMESPACE])
    assert raw.parse().output_text.startswith("Hello")
    assert s.attempts(raw.headers["x-generation-id"]) == [("r0", "answered")]
    label, scenario = s.routes[0]
    with urllib.request.urlopen(f"{MOCK}/_stats/{label}/{scenario}", timeout=10) as r:
        sent = json.loads(r.read())["last_request"]["body"]
    assert sent["tools"] == [NAMESPACE]


@pytest.mark.parametrize("route", ["chat", "messages", "gemini"])
def test_a_namespace_is_flattened_for_another_dialect_and_its_calls_come_back_in_it(route):
    """SPEC §21: a route of another dialect gets the namespace's function tools as its own, under
    their names; the call it makes comes back to the client with the namespace, whole and
    streamed — so Codex matches it to its tool."""
    s = Setup("responses", [(route, "tool-call")])
    response = s.openai().responses.create(model=s.model, input="Start an agent", tools=[NAMESPACE])
    call = next(item for item in response.output if item.type == "function_call")
    assert (call.name, call.namespace) == ("spawn_agent", "multi_agent_v1"), call
    label, scenario = s.routes[0]
    with urllib.request.urlopen(f"{MOCK}/_stats/{label}/{scenario}", timeout=10) as r:
        sent = json.dumps(json.loads(r.read())["last_request"]["body"])
    assert "spawn_agent" in sent and "multi_agent_v1" not in sent, sent
    with s.openai().responses.stream(model=s.model, input="Start an agent", tools=[NAMESPACE]) as stream:
        final = stream.get_final_response()
    call = next(item for item in final.output if item.type == "function_call")
    assert (call.name, call.namespace) == ("spawn_agent", "multi_agent_v1"), call


def test_a_namespace_grouping_a_provider_run_tool_is_refused_naming_it():
    s = Setup("responses", ["ok"])
    grouped = {**NAMESPACE, "tools": [{"type": "web_search"}]}
    with pytest.raises(openai.BadRequestError) as refused:
        s.openai().responses.create(model=s.model, input="Say hello", tools=[grouped])
    assert refused.value.body["param"] == "tools[0]", refused.value.body
    assert s.seen(0) == 0
