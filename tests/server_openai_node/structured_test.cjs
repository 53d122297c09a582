// Structured outputs through the official OpenAI Node.js client (npm package `openai`): for every
// schema, one request with response_format json_schema (strict) not streamed at temperature 0 and
// one streamed at temperature 1. Run by tests/server_structured_test.cpp, which passes:
//   OPENAI_NODE_DIR   folder holding node_modules/openai
//   GEM4_BASE_URL     e.g. http://127.0.0.1:PORT/v1
//   GEM4_SCHEMAS      path of a JSON array of schemas
// Prints one JSON line per response, {"schema", "output", "label"}, for scripts/validate_json_schema.py.
// Exits non-zero on any client error.
'use strict';
const fs = require('fs');
const path = require('path');

const mod = require(path.join(process.env.OPENAI_NODE_DIR, 'node_modules', 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;

async function one(client, model, schema, i, stream) {
  const request = {
    model,
    messages: [{ role: 'user', content: 'Reply in JSON.' }],
    max_tokens: 800,
    temperature: stream ? 1 : 0,
    seed: i,
    response_format: { type: 'json_schema', json_schema: { name: `schema_${i}`, schema, strict: true } },
  };
  if (!stream) {
    const r = await client.chat.completions.create(request);
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason };
  }
  const s = await client.chat.completions.create({ ...request, stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of s) {
    if (!chunk.choices.length) continue;
    text += chunk.choices[0].delta.content || '';
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  return { text, finish };
}

async function main() {
  const schemas = JSON.parse(fs.readFileSync(process.env.GEM4_SCHEMAS, 'utf8'));
  const client = new OpenAI({ baseURL: process.env.GEM4_BASE_URL, apiKey: 'unused', timeout: 120000, maxRetries: 0 });
  const model = (await client.models.list()).data[0].id;
  // Two requests in flight at a time: the server's two slots, each with its own constraint.
  const jobs = [];
  schemas.forEach((schema, i) => jobs.push([schema, i, false], [schema, i, true]));
  const lines = new Array(jobs.length);
  let next = 0;
  async function worker() {
    while (next < jobs.length) {
      const k = next++;
      const [schema, i, stream] = jobs[k];
      const r = await one(client, model, schema, i, stream);
      const label = `schema ${i} ${stream ? 'stream temp 1' : 'temp 0'} finish ${r.finish}`;
      lines[k] = JSON.stringify({ schema, output: r.text, label });
    }
  }
  await Promise.all([worker(), worker()]);
  process.stdout.write(lines.join('\n') + '\n');
}

main().catch((e) => {
  process.stderr.write(`client error: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
