// The Vercel AI SDK (`ai` with its openai, anthropic and google providers) against Switchyard, as an
// application uses it: generateText, streamText, a tool loop (`stopWhen`) and generateObject, each
// parsed by the SDK's own strict schemas. Run by tests/agents/test_agents.py with one JSON argument:
// {"provider": "openai" | "openai-chat" | "anthropic" | "google", "base": gateway URL, "key": API key,
//  "models": {"text": …, "tools": …, "object": …}}; prints one JSON object: each case's result, or
// its error's name and message.
import { generateObject, generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createGoogleGenerativeAI } from '@ai-sdk/google';
import { createOpenAI } from '@ai-sdk/openai';

const { provider, base, key, models } = JSON.parse(process.argv[2]);
const model = {
  // The openai provider's default model speaks Responses; `.chat` speaks Chat Completions.
  openai: (id) => createOpenAI({ baseURL: `${base}/v1`, apiKey: key })(id),
  'openai-chat': (id) => createOpenAI({ baseURL: `${base}/v1`, apiKey: key }).chat(id),
  anthropic: (id) => createAnthropic({ baseURL: `${base}/v1`, apiKey: key })(id),
  google: (id) => createGoogleGenerativeAI({ baseURL: `${base}/v1beta`, apiKey: key })(id),
}[provider];

const weather = tool({
  description: 'The weather in a city',
  inputSchema: jsonSchema({
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  }),
  execute: async ({ city }) => `sunny in ${city}, 21 degrees`,
});

const cases = {
  async generateText() {
    const r = await generateText({ model: model(models.text), prompt: 'Say hello', maxRetries: 0 });
    return { text: r.text, finishReason: r.finishReason, usage: r.usage };
  },
  async streamText() {
    let error;
    const r = streamText({
      model: model(models.text),
      prompt: 'Say hello',
      maxRetries: 0,
      onError: ({ error: e }) => {
        error = e;
      },
    });
    let text = '';
    for await (const delta of r.textStream) text += delta;
    if (error) throw error;
    return { text, finishReason: await r.finishReason, usage: await r.usage };
  },
  async tools() {
    const r = await generateText({
      model: model(models.tools),
      prompt: 'What is the weather in Paris?',
      tools: { get_weather: weather },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    });
    return {
      text: r.text,
      steps: r.steps.length,
      calls: r.steps.flatMap((s) => s.toolCalls.map((c) => c.toolName)),
      results: r.steps.flatMap((s) => s.toolResults.map((t) => t.output)),
    };
  },
  async generateObject() {
    const r = await generateObject({
      model: model(models.object),
      prompt: 'Rate it',
      schema: jsonSchema({
        type: 'object',
        properties: { answer: { type: 'string' }, score: { type: 'integer' } },
        required: ['answer', 'score'],
        additionalProperties: false,
      }),
      maxRetries: 0,
    });
    return { object: r.object };
  },
};

const out = {};
await Promise.all(
  Object.entries(cases).map(async ([name, run]) => {
    try {
      out[name] = { ok: await run() };
    } catch (e) {
      out[name] = { error: `${e?.name}: ${e?.message}`, cause: e?.cause ? String(e.cause).slice(0, 2000) : undefined };
    }
  }),
);
console.log(JSON.stringify(out));
