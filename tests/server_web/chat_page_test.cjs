// Drives gem4's chat page (GET /) in headless Chromium through chromedriver (npm selenium-webdriver,
// Debian's chromium + chromium-driver). Run by tests/server_web_test.cpp
// (ServerTest.ChatPageInHeadlessChromium), which installs the package and passes:
//   SELENIUM_NODE_DIR  folder holding node_modules/selenium-webdriver
//   GEM4_BASE_URL      http://127.0.0.1:PORT
//   GEM4_REASONING     JSON request fields that make the tiny model write reasoning
// The page's answers are checked against the same requests sent to the API without streaming.
// Prints one line per check; exits non-zero on the first failure.
'use strict';
const path = require('path');
const fs = require('fs');
const os = require('os');

const dir = path.join(process.env.SELENIUM_NODE_DIR, 'node_modules', 'selenium-webdriver');
const { Builder, By, Key, until } = require(dir);
const chrome = require(path.join(dir, 'chrome'));
const base = process.env.GEM4_BASE_URL;

function check(ok, what, detail) {
  if (!ok) throw new Error(`FAILED: ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail)}`);
  console.log(`ok: ${what}`);
}

async function api(body) {
  const r = await fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const j = await r.json();
  if (!r.ok) throw new Error('reference request failed: ' + JSON.stringify(j));
  return j.choices[0].message;
}

async function main() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'gem4-chromium-'));
  const options = new chrome.Options()
    .setChromeBinaryPath('/usr/bin/chromium')
    .addArguments('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
      '--no-first-run', `--user-data-dir=${profile}`);
  const service = new chrome.ServiceBuilder('/usr/bin/chromedriver');
  const driver = await new Builder().forBrowser('chrome').setChromeOptions(options).setChromeService(service).build();
  const js = (script, ...args) => driver.executeScript(script, ...args);
  const assistants = () => driver.findElements(By.css('.message.assistant'));
  // Waits until the n-th assistant message (1-based) leaves "streaming"; returns its state.
  async function finished(n, timeout = 60000) {
    await driver.wait(async () => {
      const els = await assistants();
      if (els.length < n) return false;
      const state = await els[n - 1].getAttribute('data-state');
      return state && state !== 'streaming';
    }, timeout, `assistant message ${n} did not finish`);
    const el = (await assistants())[n - 1];
    return {
      state: await el.getAttribute('data-state'),
      chunks: Number(await el.getAttribute('data-chunks')),
      content: await js('return arguments[0].querySelector(".content").textContent', el),
      reasoning: await js('return arguments[0].querySelector(".reasoning-text").textContent', el),
      reasoningHidden: await js('return arguments[0].querySelector("details.reasoning").hidden', el),
      reasoningOpen: await js('return arguments[0].querySelector("details.reasoning").open', el),
      note: await js('return Array.from(arguments[0].querySelectorAll(".note")).map(n => n.textContent).join(" ")', el),
    };
  }
  async function setValue(id, value) {  // as a user would: the page listens to 'input'
    await js(`const e = document.getElementById(arguments[0]);
              if (e.type === 'checkbox') e.checked = arguments[1]; else e.value = arguments[1];
              e.dispatchEvent(new Event('input'));`, id, value);
  }
  try {
    await driver.get(base + '/');
    check((await driver.getTitle()) === 'gem4 chat', 'the page loads');
    await driver.wait(until.elementLocated(By.css('#model[data-ready="true"]')), 20000, 'model name never shown');
    const model = await driver.findElement(By.id('model')).getText();
    check(model === 'tiny-gemma4-f32', 'the page shows the model from /v1/models', model);

    // Turn 1: system prompt, temperature 0, typed message sent with Enter.
    const system = 'You answer in the words of the scripture.';
    await setValue('system', system);
    await setValue('temperature', '0');
    await setValue('max-tokens', '24');
    await driver.findElement(By.id('input')).sendKeys('Blessed are the', Key.ENTER);
    const t1 = await finished(1);
    const ref1 = await api({ messages: [{ role: 'system', content: system }, { role: 'user', content: 'Blessed are the' }],
      temperature: 0, max_tokens: 24 });
    check(t1.state === 'done', 'turn 1 finishes', t1);
    check(t1.content === ref1.content, 'turn 1 streams the API\'s answer', { page: t1.content, api: ref1.content });
    check(t1.chunks > 1, 'turn 1 arrived in several chunks', t1.chunks);
    check(t1.reasoningHidden, 'no reasoning box without reasoning');
    const userBubbles = await driver.findElements(By.css('.message.user'));
    check(userBubbles.length === 1, 'the user message is shown');

    // Turn 2: the whole history goes back to the server, whose prefix cache reuses it.
    await driver.findElement(By.id('input')).sendKeys('And the LORD said unto Moses,');
    await driver.findElement(By.id('send')).click();
    const t2 = await finished(2);
    const ref2 = await api({ messages: [{ role: 'system', content: system }, { role: 'user', content: 'Blessed are the' },
      { role: 'assistant', content: t1.content }, { role: 'user', content: 'And the LORD said unto Moses,' }],
      temperature: 0, max_tokens: 24 });
    check(t2.state === 'done' && t2.content === ref2.content, 'turn 2 continues the conversation', { page: t2.content, api: ref2.content });
    check(/\(\d+ cached\)/.test(t2.note) && !/\(0 cached\)/.test(t2.note), 'turn 2 reused the cached history', t2.note);

    // Reasoning: shown, collapsed.
    await driver.findElement(By.id('clear')).click();
    check((await assistants()).length === 0, 'Clear chat empties the conversation');
    await setValue('system', '');
    await setValue('max-tokens', '10');
    await setValue('think', true);
    await setValue('extra', process.env.GEM4_REASONING);
    await driver.findElement(By.id('input')).sendKeys('Blessed are the', Key.ENTER);
    const t3 = await finished(1);
    const ref3 = await api({ messages: [{ role: 'user', content: 'Blessed are the' }], temperature: 0, max_tokens: 10,
      chat_template_kwargs: { enable_thinking: true }, ...JSON.parse(process.env.GEM4_REASONING) });
    check(t3.state === 'done', 'the reasoning turn finishes', t3);
    check(t3.reasoning === ref3.reasoning_content && t3.reasoning.length > 0, 'the reasoning is shown',
      { page: t3.reasoning, api: ref3.reasoning_content });
    check(!t3.reasoningHidden && !t3.reasoningOpen, 'the reasoning box is collapsed');
    check(t3.content === (ref3.content || ''), 'the answer after the reasoning', { page: t3.content, api: ref3.content });

    // Stop: a long answer (end-of-turn tokens banned) stopped after its first chunk. The tiny model
    // writes its 8000 tokens in a few seconds, so on a slow or loaded machine the answer can end
    // on its own before the click lands (state 'done'): then Stop was never exercised, and the
    // round is tried again (up to three times; a Stop that does nothing fails all three).
    await setValue('think', false);
    await setValue('max-tokens', '8000');
    await setValue('extra', JSON.stringify({ logit_bias: { 1: -100, 6: -100, 14: -100 } }));
    let t4;
    for (let round = 0; round < 3; round++) {
      await driver.findElement(By.id('clear')).click();
      await driver.findElement(By.id('input')).sendKeys('Write a psalm about the sea.', Key.ENTER);
      await driver.wait(async () => {
        const els = await assistants();
        return els.length === 1 && Number(await els[0].getAttribute('data-chunks')) > 0;
      }, 30000, 'the long answer never started');
      await driver.findElement(By.id('stop')).click();
      t4 = await finished(1);
      if (t4.state !== 'done') break;
      console.log(`note: the long answer ended (${t4.chunks} chunks) before Stop landed; again`);
    }
    check(t4.state === 'stopped', 'Stop ends the stream', t4.state);
    check(await driver.findElement(By.id('send')).isEnabled(), 'Send is enabled again');
    let idle = false;
    for (let i = 0; i < 50 && !idle; i++) {
      const h = await (await fetch(base + '/health')).json();
      idle = h.slots_processing === 0;
      if (!idle) await new Promise((r) => setTimeout(r, 100));
    }
    check(idle, 'the server freed the slot of the stopped reply');
  } finally {
    await driver.quit();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
