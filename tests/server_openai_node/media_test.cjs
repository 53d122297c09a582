// Sends an image part and an audio part with the official OpenAI Node.js client (npm package `openai`)
// to `gem4 serve --mmproj` (a projector holding both towers). Run by tests/audio_server_test.cpp
// (AudioServer.OpenAINodeClientSendsImageAndAudio), which passes:
//   OPENAI_NODE_DIR  folder holding node_modules/openai
//   GEM4_BASE_URL    e.g. http://127.0.0.1:PORT/v1
//   GEM4_PNG, GEM4_WAV  the files to send
// Prints one JSON line with what the client received; exits non-zero on any client error other than
// the expected 400.
'use strict';
const fs = require('fs');
const path = require('path');

const mod = require(path.join(process.env.OPENAI_NODE_DIR, 'node_modules', 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;

async function main() {
  const client = new OpenAI({ baseURL: process.env.GEM4_BASE_URL, apiKey: 'unused', timeout: 60000, maxRetries: 0 });
  const png = fs.readFileSync(process.env.GEM4_PNG).toString('base64');
  const wav = fs.readFileSync(process.env.GEM4_WAV).toString('base64');
  const model = (await client.models.list()).data[0].id;
  const ask = (content) =>
    client.chat.completions.create({ model, messages: [{ role: 'user', content }], max_tokens: 3, temperature: 0 });
  const out = {};
  const both = await ask([
    { type: 'image_url', image_url: { url: 'data:image/png;base64,' + png } },
    { type: 'input_audio', input_audio: { data: wav, format: 'wav' } },
    { type: 'text', text: 'Describe both.' },
  ]);
  out.both = { finish_reason: both.choices[0].finish_reason, usage: both.usage };
  const audio = await ask([
    { type: 'input_audio', input_audio: { data: wav, format: 'wav' } },
    { type: 'text', text: 'Describe both.' },
  ]);
  out.audio = { usage: audio.usage };
  const text = await ask('Describe both.');
  out.text = { usage: text.usage };
  try {
    await ask([{ type: 'input_audio', input_audio: { data: wav, format: 'mp3' } }]);
    out.bad = { status: 200 };
  } catch (e) {
    out.bad = { status: e.status, message: e.message };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + '\n');
  process.exit(1);
});
