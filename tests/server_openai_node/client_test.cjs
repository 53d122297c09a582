// Drives `gem4 serve` with the official OpenAI Node.js client (npm package `openai`).
// Run by tests/server_test.cpp (ServerTest.OpenAINodeClient), which installs the package and passes:
//   OPENAI_NODE_DIR   folder holding node_modules/openai
//   GEM4_BASE_URL     e.g. http://127.0.0.1:PORT/v1
//   GEM4_REQUESTS     JSON: {"messages": [...], "max_tokens": N, "tool": {...forcing request fields...}}
// Prints one JSON line with what the client received; the C++ test checks it against the library's
// own greedy generation. Exits non-zero on any client error.
'use strict';
const path = require('path');

const mod = require(path.join(process.env.OPENAI_NODE_DIR, 'node_modules', 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;

async function main() {
  const spec = JSON.parse(process.env.GEM4_REQUESTS);
  const client = new OpenAI({
    baseURL: process.env.GEM4_BASE_URL,
    apiKey: process.env.GEM4_API_KEY || 'unused',
    timeout: 60000,
    maxRetries: 0,
  });
  const out = {};

  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);

  const plain = await client.chat.completions.create({
    model: out.models[0],
    messages: spec.messages,
    max_tokens: spec.max_tokens,
    temperature: 0,
  });
  out.nonstream = {
    content: plain.choices[0].message.content,
    finish_reason: plain.choices[0].finish_reason,
    usage: plain.usage,
  };

  const stream = await client.chat.completions.create({
    model: out.models[0],
    messages: spec.messages,
    max_tokens: spec.max_tokens,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    text += chunk.choices[0].delta.content || '';
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  out.stream = { content: text, finish_reason: finish, usage, chunks };

  const tool = await client.chat.completions.create({ model: out.models[0], ...spec.tool });
  out.tool = {
    finish_reason: tool.choices[0].finish_reason,
    tool_calls: tool.choices[0].message.tool_calls || [],
    content: tool.choices[0].message.content,
  };

  // The same tool request streamed: the client's accumulation of tool-call deltas.
  const toolStream = await client.chat.completions.create({ model: out.models[0], ...spec.tool, stream: true });
  const calls = [];
  let toolFinish = null;
  for await (const chunk of toolStream) {
    if (!chunk.choices.length) continue;
    const c = chunk.choices[0];
    for (const d of c.delta.tool_calls || []) {
      if (!calls[d.index]) calls[d.index] = { id: '', name: '', arguments: '' };
      if (d.id) calls[d.index].id = d.id;
      if (d.function && d.function.name) calls[d.index].name += d.function.name;
      if (d.function && d.function.arguments) calls[d.index].arguments += d.function.arguments;
    }
    if (c.finish_reason) toolFinish = c.finish_reason;
  }
  out.tool_stream = { finish_reason: toolFinish, tool_calls: calls };

  // A bad request surfaces as the client's APIError with our status and error body.
  try {
    await client.chat.completions.create({ model: out.models[0], messages: [{ role: 'wizard', content: 'x' }] });
    out.bad_request = { status: 0 };
  } catch (e) {
    out.bad_request = { status: e.status, param: e.param || (e.error && e.error.param) || null };
  }

  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  process.stderr.write(`client error: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
