"""The clouds users fail over between (SPEC §20), through the official SDKs: a model per cloud kind
— text and stream, failover from a throttled cloud route to another route, a mid-stream error ending
with the client's error frame, usage and cost on /v1/generation as the fake reported them, and a
wrong credential answered by the provider's own auth error, classified `account`. Bedrock's Converse
API, which no client speaks, serves every client dialect translated (text, stream, a tool round trip).

The mock's fakes check what the real services check: Azure's `api-key` header and URL shapes;
Bedrock's Signature Version 4 recomputed from the request as received, its body rules (InvokeModel's
Anthropic bodies, Converse's own) and its event-stream frames with both CRCs; Vertex's
service-account JWT (its RS256 signature against the account's public key, its claims), the access
token on every call, and the URL shapes.
"""

import json

import anthropic
import openai
import pytest
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from test_sdks import MOCK, Cloud, Setup
from test_translation import CLIENTS, DIALECTS, FINISHED

AZURE = {"kind": "azure", "key_secret": "E2E_AZURE_KEY", "path": "/openai/v1"}
AZURE_DEPLOYMENT = {"kind": "azure", "key_secret": "E2E_AZURE_KEY", "api_version": "2024-10-21",
                    "path": "/openai/deployments/gpt-4o-deployment"}
BEDROCK = {"kind": "bedrock", "region": "us-east-1", "access_key_secret": "E2E_AWS_ACCESS_KEY_ID",
           "secret_key_secret": "E2E_AWS_SECRET_ACCESS_KEY"}
# Temporary credentials (an STS key): the session token goes with every request, signed.
BEDROCK_TEMPORARY = {"kind": "bedrock", "region": "us-east-1", "access_key_secret": "E2E_AWS_TEMP_ACCESS_KEY_ID",
                     "secret_key_secret": "E2E_AWS_TEMP_SECRET_ACCESS_KEY",
                     "session_token_secret": "E2E_AWS_SESSION_TOKEN"}
CLAUDE = "anthropic.claude-3-5-haiku-20241022-v1:0"
MESSAGES = [{"role": "user", "content": "Say hello"}]


def azure(scenario, api="chat", fields=AZURE):
    return Cloud(api, scenario, fields, "gpt-4o-deployment")


def bedrock(scenario, fields=BEDROCK):
    return Cloud("messages", scenario, fields, CLAUDE)


def converse(scenario, fields=BEDROCK, model="meta.llama3-1-8b-instruct-v1:0"):
    return Cloud("converse", scenario, fields, model)


def charged_as_reported(s, generation_id, output_tokens):
    g = s.generation(generation_id)
    assert not g["estimated"], g
    assert g["usage"]["output_tokens"] == output_tokens, g["usage"]
    assert abs(g["total_cost"] - (g["usage"]["input_tokens"] * 1.0 + output_tokens * 2.0) / 1e6) < 1e-9, g
    return g


# ---- Azure OpenAI --------------------------------------------------------------------------------

@pytest.mark.parametrize("fields", [AZURE, AZURE_DEPLOYMENT], ids=["v1", "deployment"])
def test_azure_answers_chat_whole_and_streamed(fields):
    s = Setup("chat", [azure("ok", fields=fields)])
    raw = s.openai().chat.completions.with_raw_response.create(model=s.model, messages=MESSAGES)
    completion = raw.parse()
    assert completion.choices[0].message.content.startswith("Hello")
    charged_as_reported(s, raw.headers["x-generation-id"], completion.usage.completion_tokens)
    with s.openai().chat.completions.with_streaming_response.create(
            model=s.model, messages=MESSAGES, stream=True, stream_options={"include_usage": True}) as raw:
        chunks = list(raw.parse())
        generation_id = raw.headers["x-generation-id"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("Hello")
    charged_as_reported(s, generation_id, chunks[-1].usage.completion_tokens)


def test_azure_serves_responses_and_other_dialects_translated():
    s = Setup("responses", [azure("ok", api="responses")])
    assert s.openai().responses.create(model=s.model, input="Say hello").output_text.startswith("Hello")
    message = s.anthropic().messages.create(model=s.model, max_tokens=64, messages=MESSAGES)
    assert message.content[0].text.startswith("Hello")


def test_a_throttled_azure_route_fails_over():
    s = Setup("chat", [azure("status/429/rate_limit"), "ok"])
    raw = s.openai().chat.completions.with_raw_response.create(model=s.model, messages=MESSAGES)
    assert raw.parse().choices[0].message.content.startswith("Hello")
    assert s.attempts(raw.headers["x-generation-id"]) == [("r0", "rate_limited"), ("r1", "answered")]


def test_a_broken_azure_stream_ends_with_the_clients_error():
    s = Setup("chat", [azure("cut-after/2"), "ok"])
    with pytest.raises(openai.APIError) as raised:
        for _ in s.openai().chat.completions.create(model=s.model, messages=MESSAGES, stream=True):
            pass
    assert "broke" in str(raised.value)
    assert s.seen(1) == 0


def test_a_wrong_azure_key_is_the_accounts_failure():
    s = Setup("chat", [azure("ok", fields={**AZURE, "key_secret": "E2E_UPSTREAM_KEY"}), "ok"])
    raw = s.openai().chat.completions.with_raw_response.create(model=s.model, messages=MESSAGES)
    assert raw.parse().choices[0].message.content.startswith("Hello")
    assert s.attempts(raw.headers["x-generation-id"]) == [("r0", "account"), ("r1", "answered")]


# ---- AWS Bedrock (Anthropic models through InvokeModel, signed with SigV4) ---------------------

def test_bedrock_answers_an_anthropic_client_whole_and_streamed():
    s = Setup("messages", [bedrock("ok")])
    raw = s.anthropic().messages.with_raw_response.create(model=s.model, max_tokens=256, messages=MESSAGES)
    message = raw.parse()
    assert message.content[0].text.startswith("Hello")
    charged_as_reported(s, raw.headers["x-generation-id"], message.usage.output_tokens)
    with s.anthropic().messages.stream(model=s.model, max_tokens=256, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        generation_id = stream.response.headers["x-generation-id"]
    assert text.startswith("Hello") and final.stop_reason == "end_turn"
    charged_as_reported(s, generation_id, final.usage.output_tokens)


def test_bedrock_serves_an_openai_client_translated():
    s = Setup("messages", [bedrock("ok")])
    completion = s.openai().chat.completions.create(model=s.model, messages=MESSAGES)
    assert completion.choices[0].message.content.startswith("Hello")
    chunks = list(s.openai().chat.completions.create(model=s.model, messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("Hello")
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_a_throttled_bedrock_route_fails_over():
    s = Setup("messages", [bedrock("status/429"), "ok"])
    raw = s.anthropic().messages.with_raw_response.create(model=s.model, max_tokens=64, messages=MESSAGES)
    assert raw.parse().content[0].text.startswith("Hello")
    assert s.attempts(raw.headers["x-generation-id"]) == [("r0", "rate_limited"), ("r1", "answered")]


def test_a_bedrock_exception_mid_stream_ends_with_the_clients_error():
    s = Setup("messages", [bedrock("error-event-after/2/overloaded"), "ok"])
    kinds = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        for event in s.anthropic().messages.create(model=s.model, max_tokens=64, messages=MESSAGES, stream=True):
            kinds.append(event.type)
    assert "content_block_delta" in kinds, "content came before the exception"
    assert raised.value.body["error"]["type"] == "overloaded_error"
    with pytest.raises(openai.APIError):
        for _ in s.openai().chat.completions.create(model=s.model, messages=MESSAGES, stream=True):
            pass
    assert s.seen(1) == 0, "never a splice from another route"


def test_a_wrong_aws_secret_is_the_accounts_failure():
    s = Setup("messages", [bedrock("ok", fields={**BEDROCK, "secret_key_secret": "E2E_UPSTREAM_KEY"}), "ok"])
    raw = s.anthropic().messages.with_raw_response.create(model=s.model, max_tokens=64, messages=MESSAGES)
    assert raw.parse().content[0].text.startswith("Hello")
    assert s.attempts(raw.headers["x-generation-id"]) == [("r0", "account"), ("r1", "answered")]


# Claude Code's betas: one each cloud documents, one only Anthropic's own API knows (SPEC §21).
BETAS = "interleaved-thinking-2025-05-14,claude-code-20250219"


@pytest.mark.parametrize("cloud", ["bedrock", "vertex"])
def test_each_cloud_gets_the_betas_it_takes_in_its_place_and_the_rest_are_listed(cloud):
    s = Setup("messages", [bedrock("ok") if cloud == "bedrock" else vertex("ok")])
    raw = s.anthropic().messages.with_raw_response.create(
        model=s.model, max_tokens=64, messages=MESSAGES, extra_headers={"anthropic-beta": BETAS})
    assert raw.parse().content[0].text.startswith("Hello")
    sent = last_request(s, 0)
    if cloud == "bedrock":
        assert sent["body"]["anthropic_beta"] == ["interleaved-thinking-2025-05-14"], sent
    else:
        assert "anthropic_beta" not in sent["body"], sent
        assert sent["headers"]["anthropic-beta"] == "interleaved-thinking-2025-05-14", sent
    attempt = s.generation(raw.headers["x-generation-id"])["attempts"][0]
    assert attempt["dropped"] == ["anthropic-beta: claude-code-20250219"], attempt


@pytest.mark.parametrize("cloud", ["bedrock", "vertex"])
def test_a_system_message_inside_the_conversation_reaches_a_cloud_in_its_system_prompt(cloud):
    """Claude Code's `mid-conversation-system` beta: a cloud takes neither the beta nor a `system`
    role among the messages (its fake refuses both), so the message joins the system prompt."""
    s = Setup("messages", [bedrock("ok") if cloud == "bedrock" else vertex("ok")])
    turns = [{"role": "user", "content": "Say hello"}, {"role": "assistant", "content": "Hello"},
             {"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Again"}]
    beta = {"anthropic-beta": "mid-conversation-system-2026-04-07"}
    message = s.anthropic().messages.create(model=s.model, max_tokens=64, system="Be brief.", messages=turns,
                                            extra_headers=beta)
    assert message.content[0].text.startswith("Hello")
    sent = last_request(s, 0)["body"]
    assert "Answer in one word." in json.dumps(sent["system"]) and "Be brief." in json.dumps(sent["system"]), sent
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"], sent
    # Claude Code sends such a conversation without the header too.
    with s.anthropic().messages.stream(model=s.model, max_tokens=64, messages=turns) as stream:
        assert "".join(stream.text_stream).startswith("Hello")


# ---- AWS Bedrock Converse (any model, every client dialect translated) -------------------------

@pytest.mark.parametrize("client", DIALECTS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_converse_serves_every_client_whole_and_streamed(client, stream):
    # The fake reports 3 cache-read and 4 cache-write tokens beside the uncached input.
    s = Setup("chat", [converse("cache/3/4")])
    text, finish, generation_id = CLIENTS[client].text(s, stream)
    assert text.startswith("Hello from the mock"), text
    assert finish == FINISHED[client]
    g = s.generation(generation_id)
    attempt = g["attempts"][-1]
    assert (g["api"], attempt["api"], attempt["translated"]) == (client, "converse", True), attempt
    u = g["usage"]
    assert (u["cache_read_tokens"], u["cache_write_tokens"]) == (3, 4), u
    assert u["input_tokens"] > 7 and u["output_tokens"] > 0 and not g["estimated"], g
    # No cache prices: every input token at the input price, output at its own.
    assert abs(g["total_cost"] - (u["input_tokens"] * 1.0 + u["output_tokens"] * 2.0) / 1e6) < 1e-9, g


def test_converse_usage_is_what_the_fake_reported():
    s = Setup("chat", [converse("ok")])
    raw = s.anthropic().messages.with_raw_response.create(model=s.model, max_tokens=256, messages=MESSAGES)
    message = raw.parse()
    assert message.content[0].text.startswith("Hello") and message.stop_reason == "end_turn"
    g = charged_as_reported(s, raw.headers["x-generation-id"], message.usage.output_tokens)
    assert g["usage"]["input_tokens"] == message.usage.input_tokens
    with s.openai().chat.completions.with_streaming_response.create(
            model=s.model, messages=MESSAGES, stream=True, stream_options={"include_usage": True}) as raw:
        chunks = list(raw.parse())
        generation_id = raw.headers["x-generation-id"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("Hello")
    charged_as_reported(s, generation_id, chunks[-1].usage.completion_tokens)


@pytest.mark.parametrize("client", ["chat", "messages", "responses", "gemini"])
def test_a_tool_round_trip_through_converse(client):
    s = Setup("chat", [converse("tool-call")])
    answer = CLIENTS[client].tool_round_trip(s)
    assert "sunny, 21 degrees" in answer, answer


def test_a_throttled_converse_route_fails_over():
    s = Setup("chat", [converse("status/429"), "ok"])
    raw = s.openai().chat.completions.with_raw_response.create(model=s.model, messages=MESSAGES)
    assert raw.parse().choices[0].message.content.startswith("Hello")
    assert s.attempts(raw.headers["x-generation-id"]) == [("r0", "rate_limited"), ("r1", "answered")]


def test_a_converse_exception_mid_stream_ends_with_the_clients_error():
    s = Setup("chat", [converse("error-event-after/2/overloaded"), "ok"])
    kinds = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        for event in s.anthropic().messages.create(model=s.model, max_tokens=64, messages=MESSAGES, stream=True):
            kinds.append(event.type)
    assert "content_block_delta" in kinds, "content came before the exception"
    assert raised.value.body["error"]["type"] == "overloaded_error"
    received = []
    with pytest.raises(openai.APIError):
        for chunk in s.openai().chat.completions.create(model=s.model, messages=MESSAGES, stream=True):
            received.extend(c.delta.content or "" for c in chunk.choices)
    assert "".join(received).startswith("Hello")
    assert s.seen(1) == 0, "never a splice from another route"


def test_what_converse_cannot_carry_goes_to_the_next_route():
    s = Setup("chat", [converse("ok"), "ok"])
    raw = s.openai().chat.completions.with_raw_response.create(model=s.model, messages=MESSAGES, temperature=1.5)
    assert raw.parse().choices[0].message.content.startswith("Hello")
    g = s.generation(raw.headers["x-generation-id"])
    assert [a["route"] for a in g["attempts"] if a["outcome"] == "answered"] == ["r1"], g["attempts"]
    assert s.seen(0) == 0, "nothing was sent to the Converse route"


def test_temporary_aws_credentials_send_their_session_token_signed():
    s = Setup("chat", [bedrock("ok", fields=BEDROCK_TEMPORARY), Cloud("converse", "ok", BEDROCK_TEMPORARY, CLAUDE)])
    raw = s.anthropic().messages.with_raw_response.create(model=s.model, max_tokens=64, messages=MESSAGES)
    assert raw.parse().content[0].text.startswith("Hello")
    assert s.attempts(raw.headers["x-generation-id"]) == [("r0", "answered")]
    s = Setup("chat", [Cloud("converse", "ok", BEDROCK_TEMPORARY, CLAUDE)])
    assert s.openai().chat.completions.create(model=s.model, messages=MESSAGES).choices[0].message.content.startswith("Hello")
    # The same key without its token: AWS's own refusal, the account's failure.
    no_token = {k: v for k, v in BEDROCK_TEMPORARY.items() if k != "session_token_secret"}
    s = Setup("chat", [bedrock("ok", fields=no_token), "ok"])
    raw = s.openai().chat.completions.with_raw_response.create(model=s.model, messages=MESSAGES)
    assert raw.parse().choices[0].message.content.startswith("Hello")
    assert s.attempts(raw.headers["x-generation-id"]) == [("r0", "account"), ("r1", "answered")]


def test_a_cloud_provider_missing_what_its_kind_needs_is_refused_naming_the_field():
    from test_sdks import call, ADMIN
    status, reply = call("PUT", "/admin/providers/azure-without-key",
                         {"kind": "azure", "base_url": "https://r.openai.azure.com/openai/v1"},
                         {"authorization": f"Bearer {ADMIN}"})
    assert status == 400, reply
    assert "key_secret" in reply["error"]["message"], reply
    status, reply = call("PUT", "/admin/providers/bedrock-without-region",
                         {"kind": "bedrock", "access_key_secret": "A", "secret_key_secret": "S"},
                         {"authorization": f"Bearer {ADMIN}"})
    assert status == 400, reply
    assert "region" in reply["error"]["message"], reply


# ---- Google Vertex AI (Gemini and Anthropic models, OAuth2 tokens minted from a service account) -

VERTEX = {"kind": "vertex", "project": "switchyard-e2e", "region": "us-east5", "key_secret": "E2E_VERTEX_SA"}
VERTEX_CLAUDE = "claude-3-5-haiku@20241022"
VERTEX_GEMINI = "gemini-2.5-flash"


def vertex(scenario, api="messages", fields=VERTEX):
    return Cloud(api, scenario, fields, VERTEX_CLAUDE if api == "messages" else VERTEX_GEMINI)


def last_request(s, i):
    """What the mock's route `i` was last sent: its path, headers and body."""
    import urllib.request
    label, scenario = s.routes[i]
    with urllib.request.urlopen(f"{MOCK}/_stats/{label}/{scenario}", timeout=10) as r:
        return json.loads(r.read())["last_request"]


def test_vertex_answers_an_anthropic_client_whole_and_streamed():
    s = Setup("messages", [vertex("ok")])
    raw = s.anthropic().messages.with_raw_response.create(model=s.model, max_tokens=256, messages=MESSAGES)
    message = raw.parse()
    assert message.content[0].text.startswith("Hello")
    charged_as_reported(s, raw.headers["x-generation-id"], message.usage.output_tokens)
    sent = last_request(s, 0)
    assert sent["path"].endswith(
        f"/v1/projects/switchyard-e2e/locations/us-east5/publishers/anthropic/models/{VERTEX_CLAUDE}:rawPredict")
    assert sent["headers"]["authorization"].startswith("Bearer ya29."), "a minted access token"
    assert "model" not in sent["body"] and sent["body"]["anthropic_version"] == "vertex-2023-10-16"
    with s.anthropic().messages.stream(model=s.model, max_tokens=256, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        generation_id = stream.response.headers["x-generation-id"]
    assert text.startswith("Hello") and final.stop_reason == "end_turn"
    charged_as_reported(s, generation_id, final.usage.output_tokens)
    sent = last_request(s, 0)
    assert sent["path"].endswith(":streamRawPredict") and sent["body"]["stream"] is True


def test_vertex_answers_a_gemini_client_whole_and_streamed():
    s = Setup("gemini", [vertex("ok", api="gemini")])
    response = s.gemini().models.generate_content(model=s.model, contents="Say hello")
    assert response.text.startswith("Hello")
    charged_as_reported(s, response.sdk_http_response.headers["x-generation-id"],
                        response.usage_metadata.candidates_token_count)
    assert last_request(s, 0)["path"].endswith(
        f"/v1/projects/switchyard-e2e/locations/us-east5/publishers/google/models/{VERTEX_GEMINI}:generateContent")
    chunks = list(s.gemini().models.generate_content_stream(model=s.model, contents="Say hello"))
    assert "".join(c.text or "" for c in chunks).startswith("Hello")
    assert chunks[-1].candidates[0].finish_reason == genai_types.FinishReason.STOP
    charged_as_reported(s, chunks[0].sdk_http_response.headers["x-generation-id"],
                        chunks[-1].usage_metadata.candidates_token_count)
    assert last_request(s, 0)["path"].endswith(":streamGenerateContent?alt=sse")


def test_vertex_serves_an_openai_client_translated():
    s = Setup("messages", [vertex("ok")])
    completion = s.openai().chat.completions.create(model=s.model, messages=MESSAGES)
    assert completion.choices[0].message.content.startswith("Hello")
    chunks = list(s.openai().chat.completions.create(model=s.model, messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("Hello")
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert last_request(s, 0)["body"]["anthropic_version"] == "vertex-2023-10-16"


@pytest.mark.parametrize("api", ["messages", "gemini"])
def test_a_throttled_vertex_route_fails_over(api):
    s = Setup(api, [vertex("status/429", api=api), "ok"])
    if api == "messages":
        raw = s.anthropic().messages.with_raw_response.create(model=s.model, max_tokens=64, messages=MESSAGES)
        assert raw.parse().content[0].text.startswith("Hello")
        generation_id = raw.headers["x-generation-id"]
    else:
        response = s.gemini().models.generate_content(model=s.model, contents="Say hello")
        assert response.text.startswith("Hello")
        generation_id = response.sdk_http_response.headers["x-generation-id"]
    assert s.attempts(generation_id) == [("r0", "rate_limited"), ("r1", "answered")]


def test_a_vertex_error_mid_stream_ends_with_the_clients_error():
    s = Setup("messages", [vertex("error-event-after/2/overloaded"), "ok"])
    kinds = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        for event in s.anthropic().messages.create(model=s.model, max_tokens=64, messages=MESSAGES, stream=True):
            kinds.append(event.type)
    assert "content_block_delta" in kinds, "content came before the error"
    assert raised.value.body["error"]["type"] == "overloaded_error"
    g = Setup("gemini", [vertex("cut-after/2", api="gemini"), "ok"])
    received = []
    with pytest.raises(genai_errors.APIError) as raised:
        for chunk in g.gemini().models.generate_content_stream(model=g.model, contents="Say hello"):
            received.append(chunk.text or "")
    assert "".join(received).startswith("Hello"), "content came before the cut"
    assert raised.value.status == "UNAVAILABLE"
    assert (s.seen(1), g.seen(1)) == (0, 0), "never a splice from another route"


def test_ten_vertex_requests_mint_one_token():
    """Six requests at once from a cold cache, then four more: one JWT exchanged, the rest wait
    for its token or find it cached. This account's key is used by no other test."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor
    s = Setup("messages", [vertex("ok", fields={**VERTEX, "key_secret": "E2E_VERTEX_SA_MINTS"})])

    def ask(_):
        return s.anthropic().messages.create(model=s.model, max_tokens=16, messages=MESSAGES).content[0].text

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(ask, range(6)))
    answers += [ask(i) for i in range(4)]
    assert len(answers) == 10 and all(a.startswith("Hello") for a in answers)
    assert s.seen(0) == 10
    with urllib.request.urlopen(f"{MOCK}/_vertex/mints", timeout=10) as r:
        mints = json.loads(r.read())
    assert mints.get("svc-mints@switchyard-e2e.iam.gserviceaccount.com") == 1, mints


def test_a_wrong_vertex_key_is_the_accounts_failure():
    s = Setup("messages", [vertex("ok", fields={**VERTEX, "key_secret": "E2E_VERTEX_SA_WRONG"}), "ok"])
    raw = s.anthropic().messages.with_raw_response.create(model=s.model, max_tokens=64, messages=MESSAGES)
    assert raw.parse().content[0].text.startswith("Hello")
    generation_id = raw.headers["x-generation-id"]
    assert s.attempts(generation_id) == [("r0", "account"), ("r1", "answered")]
    assert s.seen(0) == 0, "no call without a token"
    record = json.dumps(s.generation(generation_id))
    assert "PRIVATE KEY" not in record and "ya29." not in record


def test_a_vertex_provider_missing_what_its_kind_needs_is_refused_naming_the_field():
    from test_sdks import call, ADMIN
    for missing in ["project", "region", "key_secret"]:
        fields = {k: v for k, v in VERTEX.items() if k != missing}
        status, reply = call("PUT", f"/admin/providers/vertex-without-{missing.replace('_', '-')}", fields,
                             {"authorization": f"Bearer {ADMIN}"})
        assert status == 400, reply
        assert missing in reply["error"]["message"], reply
