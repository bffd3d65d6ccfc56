"""Every model on every endpoint (SPEC §19): each official SDK drives a model whose only route speaks
another dialect — text, stream, a full tool round trip, structured output, an image, the SDK's own
error types for failing routes, and a broken stream raising — plus a failover across dialects.

The mock upstream validates each request as the real provider would (the field a translation bug
gets wrong is a 400 there, and the test fails), answers tool calls when asked (`tool-call`), echoes
a tool's result back (`The tool said: …`), writes JSON to the request's schema (`json`) and counts
the images it received (`echo-images`).
"""

import base64
import json

import anthropic
import openai
import pytest
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from test_sdks import Setup

DIALECTS = ["chat", "responses", "messages", "gemini"]
PAIRS = [(client, route) for client in DIALECTS for route in DIALECTS if client != route]
PROMPT = "Say hello"
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}},
                 "required": ["answer", "score"], "additionalProperties": False}
# A 1×1 PNG.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
TOOL_RESULT = "sunny, 21 degrees"


def pair_id(pair):
    return f"{pair[0]}-to-{pair[1]}"


# ---- One client per dialect: the same questions asked through each SDK --------------------------

class Chat:
    def text(self, s, stream):
        client = s.openai()
        messages = [{"role": "user", "content": PROMPT}]
        if not stream:
            raw = client.chat.completions.with_raw_response.create(model=s.model, messages=messages)
            c = raw.parse()
            return c.choices[0].message.content, c.choices[0].finish_reason, raw.headers["x-generation-id"]
        with client.chat.completions.with_streaming_response.create(
                model=s.model, messages=messages, stream=True, stream_options={"include_usage": True}) as raw:
            chunks = list(raw.parse())
            generation_id = raw.headers["x-generation-id"]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0, "the usage chunk asked for"
        return text, finish[-1], generation_id

    def tool_round_trip(self, s):
        client = s.openai()
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                   "parameters": WEATHER_SCHEMA}}]
        messages = [{"role": "user", "content": "Weather in Paris?"}]
        first = client.chat.completions.create(model=s.model, messages=messages, tools=tools)
        call = first.choices[0].message.tool_calls[0]
        assert first.choices[0].finish_reason == "tool_calls"
        assert call.function.name == "get_weather" and "city" in json.loads(call.function.arguments)
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": TOOL_RESULT}]
        second = client.chat.completions.create(model=s.model, messages=messages, tools=tools)
        return second.choices[0].message.content

    def structured(self, s):
        c = s.openai().chat.completions.create(
            model=s.model, messages=[{"role": "user", "content": "Rate it"}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "rating", "schema": ANSWER_SCHEMA, "strict": True}})
        return c.choices[0].message.content

    def image(self, s):
        url = "data:image/png;base64," + base64.b64encode(PNG).decode()
        c = s.openai().chat.completions.create(model=s.model, messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url}}]}])
        return c.choices[0].message.content

    def failing(self, s):
        with pytest.raises(openai.InternalServerError) as raised:
            s.openai().chat.completions.create(model=s.model, messages=[{"role": "user", "content": "hi"}])
        assert (raised.value.status_code, raised.value.code) == (502, "provider_error")

    def broken(self, s):
        received = []
        with pytest.raises(openai.APIError) as raised:
            for chunk in s.openai().chat.completions.create(
                    model=s.model, messages=[{"role": "user", "content": PROMPT}], stream=True):
                received.extend(c.delta.content or "" for c in chunk.choices)
        assert "broke" in str(raised.value)
        return "".join(received)


class Responses:
    def text(self, s, stream):
        client = s.openai()
        if not stream:
            raw = client.responses.with_raw_response.create(model=s.model, input=PROMPT)
            r = raw.parse()
            assert r.usage.output_tokens > 0
            return r.output_text, r.status, raw.headers["x-generation-id"]
        with client.responses.with_streaming_response.create(model=s.model, input=PROMPT, stream=True) as raw:
            events = list(raw.parse())
            generation_id = raw.headers["x-generation-id"]
        numbers = [e.sequence_number for e in events]
        assert numbers == list(range(len(events))), "sequence numbers count from 0"
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        final = events[-1]
        assert final.type == "response.completed", [e.type for e in events]
        assert final.response.output_text == deltas
        return deltas, final.response.status, generation_id

    def tool_round_trip(self, s):
        client = s.openai()
        tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
                  "parameters": WEATHER_SCHEMA}]
        first = client.responses.create(model=s.model, input="Weather in Paris?", tools=tools)
        call = next(item for item in first.output if item.type == "function_call")
        assert call.name == "get_weather" and "city" in json.loads(call.arguments)
        second = client.responses.create(model=s.model, tools=tools, input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT}])
        return second.output_text

    def structured(self, s):
        r = s.openai().responses.create(model=s.model, input="Rate it", text={"format": {
            "type": "json_schema", "name": "rating", "schema": ANSWER_SCHEMA, "strict": True}})
        return r.output_text

    def image(self, s):
        url = "data:image/png;base64," + base64.b64encode(PNG).decode()
        r = s.openai().responses.create(model=s.model, input=[{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": url}]}])
        return r.output_text

    def failing(self, s):
        with pytest.raises(openai.InternalServerError) as raised:
            s.openai().responses.create(model=s.model, input="hi")
        assert (raised.value.status_code, raised.value.code) == (502, "provider_error")

    def broken(self, s):
        events = list(s.openai().responses.create(model=s.model, input=PROMPT, stream=True))
        types = [e.type for e in events]
        assert types[-1] == "response.failed", types
        assert "broke" in events[-1].response.error.message
        return "".join(e.delta for e in events if e.type == "response.output_text.delta")


class Messages:
    def text(self, s, stream):
        client = s.anthropic()
        messages = [{"role": "user", "content": PROMPT}]
        if not stream:
            raw = client.messages.with_raw_response.create(model=s.model, max_tokens=256, messages=messages)
            m = raw.parse()
            assert m.usage.output_tokens > 0
            return m.content[0].text, m.stop_reason, raw.headers["x-generation-id"]
        with client.messages.stream(model=s.model, max_tokens=256, messages=messages) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
            generation_id = stream.response.headers["x-generation-id"]
        assert final.content[0].text == text
        return text, final.stop_reason, generation_id

    def tool_round_trip(self, s):
        client = s.anthropic()
        tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER_SCHEMA}]
        messages = [{"role": "user", "content": "Weather in Paris?"}]
        first = client.messages.create(model=s.model, max_tokens=256, messages=messages, tools=tools)
        call = next(b for b in first.content if b.type == "tool_use")
        assert first.stop_reason == "tool_use"
        assert call.name == "get_weather" and "city" in call.input
        messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                   "content": TOOL_RESULT}]}]
        second = client.messages.create(model=s.model, max_tokens=256, messages=messages, tools=tools)
        return second.content[0].text

    def structured(self, s):
        m = s.anthropic().messages.create(model=s.model, max_tokens=256, messages=[
            {"role": "user", "content": "Rate it"}], output_config={"format": {"type": "json_schema",
                                                                            "schema": ANSWER_SCHEMA}})
        return m.content[0].text

    def image(self, s):
        m = s.anthropic().messages.create(model=s.model, max_tokens=256, messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(PNG).decode()}}]}])
        return m.content[0].text

    def failing(self, s):
        with pytest.raises(anthropic.InternalServerError) as raised:
            s.anthropic().messages.create(model=s.model, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        assert raised.value.status_code == 502
        assert raised.value.body["error"]["type"] == "api_error"

    def broken(self, s):
        received = []
        with pytest.raises(anthropic.APIStatusError) as raised:
            with s.anthropic().messages.stream(model=s.model, max_tokens=256,
                                               messages=[{"role": "user", "content": PROMPT}]) as stream:
                received.extend(stream.text_stream)
        assert "broke" in str(raised.value)
        return "".join(received)


class Gemini:
    def text(self, s, stream):
        client = s.gemini()
        if not stream:
            r = client.models.generate_content(model=s.model, contents=PROMPT)
            assert r.usage_metadata.candidates_token_count > 0
            return r.text, r.candidates[0].finish_reason, r.response_id
        chunks = list(client.models.generate_content_stream(model=s.model, contents=PROMPT))
        text = "".join(c.text or "" for c in chunks)
        assert chunks[-1].usage_metadata.candidates_token_count > 0
        return text, chunks[-1].candidates[0].finish_reason, chunks[-1].response_id

    def tool_round_trip(self, s):
        client = s.gemini()
        config = genai_types.GenerateContentConfig(
            tools=[genai_types.Tool(function_declarations=[genai_types.FunctionDeclaration(
                name="get_weather", description="Weather in a city", parameters_json_schema=WEATHER_SCHEMA)])],
            automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True))
        question = genai_types.Content(role="user", parts=[genai_types.Part(text="Weather in Paris?")])
        first = client.models.generate_content(model=s.model, contents=[question], config=config)
        call = first.function_calls[0]
        assert call.name == "get_weather" and "city" in call.args
        answer = genai_types.Content(role="user", parts=[genai_types.Part.from_function_response(
            name=call.name, response={"result": TOOL_RESULT})])
        second = client.models.generate_content(
            model=s.model, contents=[question, first.candidates[0].content, answer], config=config)
        return second.text

    def structured(self, s):
        r = s.gemini().models.generate_content(model=s.model, contents="Rate it", config=genai_types.GenerateContentConfig(
            response_mime_type="application/json", response_json_schema=ANSWER_SCHEMA))
        return r.text

    def image(self, s):
        r = s.gemini().models.generate_content(model=s.model, contents=[
            genai_types.Part.from_bytes(data=PNG, mime_type="image/png"), "What is this?"])
        return r.text

    def failing(self, s):
        with pytest.raises(genai_errors.ServerError) as raised:
            s.gemini().models.generate_content(model=s.model, contents="hi")
        assert (raised.value.code, raised.value.status) == (502, "UNAVAILABLE")

    def broken(self, s):
        received = []
        with pytest.raises(genai_errors.APIError) as raised:
            for chunk in s.gemini().models.generate_content_stream(model=s.model, contents=PROMPT):
                received.append(chunk.text or "")
        assert "broke" in raised.value.message
        return "".join(received)


CLIENTS = {"chat": Chat(), "responses": Responses(), "messages": Messages(), "gemini": Gemini()}
FINISHED = {"chat": "stop", "responses": "completed", "messages": "end_turn", "gemini": genai_types.FinishReason.STOP}


def translated_attempt(s, generation_id, client, route):
    """The record names the client's API and the route's, translated."""
    g = s.generation(generation_id)
    assert g["api"] == client
    attempt = g["attempts"][-1]
    assert (attempt["api"], attempt["translated"]) == (route, True), attempt
    return g


# ---- The matrix ----------------------------------------------------------------------------------

@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_text(pair, stream):
    client, route = pair
    s = Setup(route, ["ok"])
    text, finish, generation_id = CLIENTS[client].text(s, stream)
    assert text.startswith("Hello from the mock"), text
    assert finish == FINISHED[client]
    g = translated_attempt(s, generation_id, client, route)
    assert g["usage"]["output_tokens"] > 0 and not g["estimated"], "charged from the route's own usage"
    assert g["total_cost"] > 0


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_tool_round_trip(pair):
    client, route = pair
    s = Setup(route, ["tool-call"])
    answer = CLIENTS[client].tool_round_trip(s)
    assert TOOL_RESULT in answer, answer


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_structured_output(pair):
    client, route = pair
    s = Setup(route, ["json"])
    answer = json.loads(CLIENTS[client].structured(s))
    assert set(answer) == {"answer", "score"}, answer


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_image(pair):
    client, route = pair
    s = Setup(route, ["echo-images"])
    assert CLIENTS[client].image(s) == "images: 1"


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_failing_routes_are_the_clients_own_errors(pair):
    client, route = pair
    CLIENTS[client].failing(Setup(route, ["status/500", "status/502"]))


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_a_broken_stream_raises(pair):
    client, route = pair
    s = Setup(route, ["cut-after/2", "ok"])
    received = CLIENTS[client].broken(s)
    assert received.startswith("Hello"), "content came before the cut"
    assert s.seen(1) == 0, "never a splice from another route"


@pytest.mark.parametrize("client", DIALECTS)
def test_failover_crosses_dialects(client):
    # The first route speaks another dialect and fails before content; the second, of yet another
    # dialect, answers.
    first, second = [d for d in ["chat", "messages", "gemini", "responses"] if d != client][:2]
    s = Setup(first, [(first, "status/503"), (second, "ok")])
    for stream in (False, True):
        text, _, generation_id = CLIENTS[client].text(s, stream)
        assert text.startswith("Hello from the mock"), text
        g = s.generation(generation_id)
        assert [(a["route"], a["api"], a["failure_class"] or a["outcome"]) for a in g["attempts"]] == [
            ("r0", first, "upstream_5xx"), ("r1", second, "answered")]


def test_a_model_that_forbids_translation_serves_only_its_own_dialect():
    s = Setup("chat", ["ok"], policy={"translate": False})
    with pytest.raises(anthropic.APIStatusError) as raised:
        s.anthropic().messages.create(model=s.model, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 503
    assert raised.value.body["error"]["code"] == "supply_not_configured"
    assert s.seen(0) == 0
    assert s.openai().chat.completions.create(
        model=s.model, messages=[{"role": "user", "content": "hi"}]).choices[0].message.content


def test_what_no_route_can_carry_is_a_400_naming_the_field():
    s = Setup("messages", ["ok"])
    with pytest.raises(openai.BadRequestError) as raised:
        s.openai().chat.completions.create(model=s.model, messages=[{"role": "user", "content": "hi"}], logprobs=True)
    assert raised.value.param == "logprobs", raised.value.body
    assert s.seen(0) == 0, "nothing was sent"
