"""The agents and frameworks people bring (SPEC §21), run for real against the Worker and the mock:
Claude Code (`claude -p`), Codex CLI (`codex exec`), the Vercel AI SDK (`ai` with its openai,
anthropic and google providers, tests/agents/vercel.mjs) and LangChain's ChatAnthropic — each on a
route of its own API (native) and on one of another API (translated), with a tool round trip
where the client runs tools.

Every client talks to the gateway through a recording pass-through (recorder.py): whatever the
client does with a refused request (retry, fall back, print nothing), every request it sent must
have been answered below 400. The clients run offline: no update checks, no telemetry, their
configuration in a temporary home.

Run by scripts/test with tests/sdk (same environment; AGENTS_ONLY=<pytest -k expression> runs only
these). Each test adds its own providers, models and key through the admin API.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "sdk"))
from test_sdks import GATEWAY, MOCK, UPSTREAM_KEY_NAME, admin, unique  # noqa: E402

from recorder import Recorder  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / "node_modules" / ".bin"
HELLO = "Hello from the mock upstream"
NOTE = "the note says 42"
AUTH = {"messages": "x-api-key", "gemini": "x-goog-api-key"}
# The longest one client run may take (each takes about a second).
RUN_TIMEOUT = 120


class Models:
    """Models whose one route each is a mock scenario speaking a given API, and one key with credit
    for them all."""

    def __init__(self, routes, **route_fields):
        self.names, self.labels = {}, {}
        for name, (api, scenario) in routes.items():
            label, provider = unique("l"), unique("p")
            admin("PUT", f"/admin/providers/{provider}", {"base_url": f"{MOCK}/{label}/{scenario}",
                                                          "auth": AUTH.get(api, "bearer"), "key_secret": UPSTREAM_KEY_NAME})
            model = unique(f"m-{name}")
            route = {"id": "r0", "provider": provider, "upstream_model": f"up-{name}", "apis": [api],
                     "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}, **route_fields}
            admin("PUT", f"/admin/models/{model}", {"context_window": 200000, "max_output_tokens": 32000,
                                                    "routes": [route]})
            self.names[name], self.labels[name] = model, f"{label}/{scenario}"
        account = admin("POST", "/admin/accounts", {})["id"]
        admin("POST", f"/admin/accounts/{account}/credit", {"amount_usd": 10})
        self.key = admin("POST", "/admin/keys", {"account_id": account})["key"]

    def __getitem__(self, name):
        return self.names[name]

    def seen(self, name):
        """How many requests the mock received for this model's route."""
        with urllib.request.urlopen(f"{MOCK}/_stats/{self.labels[name]}", timeout=10) as r:
            return json.loads(r.read())["requests"]


@pytest.fixture
def recorder():
    r = Recorder(GATEWAY)
    yield r
    r.close()


@pytest.fixture
def home():
    """A scratch home for one client run: its configuration, and a note a tool may read."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="agents-"))
    (path / "note.txt").write_text(NOTE + "\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def tool_call_to(name, arguments):
    """The mock scenario whose answer calls the client's tool `name` with `arguments` (then, once
    the tool's result is sent back, echoes it)."""
    return f"tool-call-to/{name}/{urllib.parse.quote(json.dumps(arguments), safe='')}"


def answered(recorder):
    """Every request the client sent was answered below 400."""
    failed = recorder.failed()
    assert not failed, f"requests the gateway refused: {failed}\nall: {recorder.paths()}"
    assert recorder.exchanges, "the client sent nothing"


def run(argv, env, cwd):
    base = {"PATH": os.environ["PATH"], "HOME": str(cwd), "LANG": "C.UTF-8", "NO_COLOR": "1"}
    p = subprocess.run(argv, env={**base, **env}, cwd=cwd, capture_output=True, text=True,
                       timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    return p


# ---- Claude Code ------------------------------------------------------------------------------

def claude(models, name, recorder, home, prompt):
    """`claude -p` pointed at the gateway as README says: base URL, key, model (the small model too)
    and no traffic elsewhere."""
    env = {"ANTHROPIC_BASE_URL": recorder.url, "ANTHROPIC_API_KEY": models.key,
           "ANTHROPIC_MODEL": models[name], "ANTHROPIC_DEFAULT_HAIKU_MODEL": models[name],
           "CLAUDE_CONFIG_DIR": str(home / ".claude"), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"}
    return run([str(BIN / "claude"), "-p", prompt], env, home)


@pytest.mark.parametrize("route", ["messages", "chat"], ids=["native", "translated"])
def test_claude_code_answers(route, recorder, home):
    models = Models({"m": (route, "ok")})
    p = claude(models, "m", recorder, home, "Say hello")
    answered(recorder)
    assert p.returncode == 0, f"claude exited {p.returncode}: {p.stdout}{p.stderr}"
    assert HELLO in p.stdout, p.stdout
    assert any(path == "/v1/messages" for _, path, _ in recorder.paths()), recorder.paths()


@pytest.mark.parametrize("route", ["messages", "chat"], ids=["native", "translated"])
def test_claude_code_tool_round_trip(route, recorder, home):
    """The model asks Claude Code to read a file; the CLI runs its Read tool and sends the result
    back; the answer quotes it."""
    models = Models({"m": (route, tool_call_to("Read", {"file_path": str(home / "note.txt")}))})
    p = claude(models, "m", recorder, home, "What does note.txt say?")
    answered(recorder)
    assert p.returncode == 0, f"claude exited {p.returncode}: {p.stdout}{p.stderr}"
    assert "The tool said:" in p.stdout and NOTE in p.stdout, p.stdout
    assert models.seen("m") >= 2, "a call, then its result"


# ---- Codex CLI --------------------------------------------------------------------------------

def codex(models, name, recorder, home, prompt, extra_config=""):
    """`codex exec` with Switchyard as its model provider (README's config.toml), else its defaults."""
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(f'''model = "{models[name]}"
model_provider = "switchyard"
{extra_config}
[model_providers.switchyard]
name = "Switchyard"
base_url = "{recorder.url}/v1"
env_key = "SWITCHYARD_API_KEY"
wire_api = "responses"
''')
    env = {"CODEX_HOME": str(codex_home), "SWITCHYARD_API_KEY": models.key}
    return run([str(BIN / "codex"), "exec", "--skip-git-repo-check", prompt], env, home)


# Codex's default tools include `web_search`, which only a route of its own API that prices it
# serves (SPEC §21: priced server tools); a model served only in translation is used with web
# search off, as README says.
# Natively also with web search off: the rest of Codex's defaults (its `namespace` tools, its
# `client_metadata`) on a route of its own API whatever the catalog prices.
NO_WEB_SEARCH = 'web_search = "disabled"'
CODEX_ROUTES = [("responses", {"tool_prices": {"web_search": 0.01}}, ""),
                ("responses", {}, NO_WEB_SEARCH),
                ("messages", {}, NO_WEB_SEARCH)]
CODEX_IDS = ["native", "native-no-web-search", "translated"]


def codex_models(route, fields, scenario):
    return Models({"m": (route, scenario)}, **fields)


@pytest.mark.parametrize("route,fields,config", CODEX_ROUTES, ids=CODEX_IDS)
def test_codex_exec_tool_round_trip(route, fields, config, recorder, home):
    """The model asks Codex to run a command; it runs it in its sandbox and sends the output back;
    the answer quotes it."""
    models = codex_models(route, fields, tool_call_to("exec_command", {"cmd": "cat note.txt"}))
    p = codex(models, "m", recorder, home, "What does note.txt say?", config)
    answered(recorder)
    assert p.returncode == 0, f"codex exited {p.returncode}: {p.stdout}{p.stderr}"
    assert "The tool said:" in p.stdout and NOTE in p.stdout, p.stdout
    assert models.seen("m") >= 2, "a call, then its output"


@pytest.mark.parametrize("route,fields,config", CODEX_ROUTES, ids=CODEX_IDS)
def test_codex_exec_answers(route, fields, config, recorder, home):
    models = codex_models(route, fields, "ok")
    p = codex(models, "m", recorder, home, "Say hello", config)
    answered(recorder)
    assert p.returncode == 0, f"codex exited {p.returncode}: {p.stdout}{p.stderr}"
    assert HELLO in p.stdout, p.stdout


# ---- The Vercel AI SDK --------------------------------------------------------------------------

# Each provider of the SDK, on its own API and on another one.
VERCEL = [("openai", "responses"), ("openai", "messages"), ("openai-chat", "chat"), ("openai-chat", "gemini"),
          ("anthropic", "messages"), ("anthropic", "chat"), ("google", "gemini"), ("google", "responses")]


NATIVE = {"openai": "responses", "openai-chat": "chat", "anthropic": "messages", "google": "gemini"}
# The translated ones again with an upstream that reports no usage: what the client's schema
# requires is still there.
VERCEL_CASES = [(p, r, "") for p, r in VERCEL] + [(p, r, "/no-usage") for p, r in VERCEL if NATIVE[p] != r]


@pytest.mark.parametrize("provider,route,usage", VERCEL_CASES,
                         ids=[f"{p}-on-{r}{u.replace('/', '-')}" for p, r, u in VERCEL_CASES])
def test_vercel_ai_sdk(provider, route, usage, recorder):
    """generateText, streamText, a tool loop run by `stopWhen` and generateObject, each parsed by
    the SDK's own (strict) schemas."""
    models = Models({"text": (route, "ok" + usage), "tools": (route, "tool-call" + usage),
                     # Anthropic's provider asks for an object as a forced call to a `json` tool;
                     # the others as a response schema.
                     "object": (route, "tool-call/json" + usage)})
    config = {"provider": provider, "base": recorder.url, "key": models.key,
              "models": {k: models[k] for k in ("text", "tools", "object")}}
    p = subprocess.run(["node", str(ROOT / "tests" / "agents" / "vercel.mjs"), json.dumps(config)],
                       capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    answered(recorder)
    errors = {case: r["error"] + (f" ({r['cause']})" if r.get("cause") else "")
              for case, r in out.items() if "error" in r}
    assert not errors, errors
    for case in ("generateText", "streamText"):
        r = out[case]["ok"]
        assert r["text"].startswith(HELLO) and r["finishReason"] == "stop", (case, r)
        if not usage:
            assert r["usage"]["inputTokens"] > 0 and r["usage"]["outputTokens"] > 0, (case, r)
    tools = out["tools"]["ok"]
    assert tools["calls"] == ["get_weather"] and tools["steps"] == 2, tools
    assert "The tool said:" in tools["text"] and "sunny in" in tools["text"], tools
    assert out["generateObject"]["ok"]["object"] == {"answer": "mock", "score": 1}, out["generateObject"]


# ---- LangChain ----------------------------------------------------------------------------------

@pytest.mark.parametrize("route", ["messages", "chat"], ids=["native", "translated"])
def test_langchain_chat_anthropic_invokes(route, recorder):
    from langchain_anthropic import ChatAnthropic

    models = Models({"m": (route, "ok")})
    llm = ChatAnthropic(model=models["m"], base_url=recorder.url, api_key=models.key, max_retries=0,
                        max_tokens=256)
    reply = llm.invoke("Say hello")
    answered(recorder)
    assert reply.content.startswith(HELLO), reply
    assert reply.usage_metadata["input_tokens"] > 0, reply.usage_metadata
    streamed = "".join(chunk.content for chunk in llm.stream("Say hello") if isinstance(chunk.content, str))
    answered(recorder)
    assert streamed.startswith(HELLO), streamed


@pytest.mark.parametrize("route", ["messages", "chat"], ids=["native", "translated"])
def test_langchain_counts_tokens(route, recorder):
    """LangChain's token counting asks `/v1/messages/count_tokens` (as Claude Code does for
    compaction)."""
    from langchain_anthropic import ChatAnthropic
    from langchain_core.messages import HumanMessage

    models = Models({"m": (route, "ok")})
    llm = ChatAnthropic(model=models["m"], base_url=recorder.url, api_key=models.key, max_retries=0)
    n = llm.get_num_tokens_from_messages([HumanMessage("Say hello, and count these words first")])
    answered(recorder)
    assert isinstance(n, int) and n > 0, n
    assert ("POST", "/v1/messages/count_tokens", 200) in recorder.paths(), recorder.paths()
