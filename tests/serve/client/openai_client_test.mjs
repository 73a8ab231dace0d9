// spore serve driven by the official openai client (tests/serve/serve_test.py starts the servers and runs this).
// Env: BASE_URL (the main server, .../v1), API_KEY, MODEL, BUSY_URL (a server with one slot and a queue of one, for
// 503 + retry). Every check prints "ok - name"; the first failure throws (exit code 1).
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const BASE_URL = process.env.BASE_URL;
const BUSY_URL = process.env.BUSY_URL;
const API_KEY = process.env.API_KEY;
const MODEL = process.env.MODEL;

// A fetch that records every response status, to see what the client retried.
function countingFetch() {
  const statuses = [];
  const f = async (url, init) => {
    const r = await fetch(url, init);
    statuses.push(r.status);
    return r;
  };
  return { f, statuses };
}

const client = new OpenAI({ baseURL: BASE_URL, apiKey: API_KEY, maxRetries: 0 });
const messages = [{ role: 'user', content: 'Tell me about the sea.' }];
let passed = 0;
async function check(name, fn) {
  await fn();
  passed += 1;
  console.log(`ok - ${name}`);
}

await check('models.list', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.ok(models.includes(MODEL), `models: ${models}`);
  const m = await client.models.retrieve(MODEL);
  assert.equal(m.id, MODEL);
});

let greedy;
await check('chat, not streamed', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  greedy = r;
});

await check('chat, streamed: role first, same text as not streamed, finish_reason, usage last', async () => {
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  let text = '';
  let finish = null;
  for (const c of chunks) {
    if (c.choices.length === 0) continue;
    assert.equal(c.object, 'chat.completion.chunk');
    text += c.choices[0].delta.content ?? '';
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  assert.equal(text, greedy.choices[0].message.content);
  assert.equal(finish, greedy.choices[0].finish_reason);
  const last = chunks[chunks.length - 1];
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, greedy.usage.completion_tokens);
  assert.equal(last.usage.prompt_tokens, greedy.usage.prompt_tokens);
});

await check('completions: text and token-array prompts, streamed and not', async () => {
  const a = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(a.object, 'text_completion');
  assert.equal(typeof a.choices[0].text, 'string');
  const s = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, stream: true });
  let text = '';
  for await (const c of s) text += c.choices[0]?.text ?? '';
  assert.equal(text, a.choices[0].text);
  const tok = await (await fetch(BASE_URL.replace(/\/v1$/, '') + '/tokenize', {
    method: 'POST', headers: { Authorization: `Bearer ${API_KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ content: 'Once upon a time', add_special: true }),
  })).json();
  const b = await client.completions.create({ model: MODEL, prompt: tok.tokens, max_tokens: 8, temperature: 0 });
  assert.equal(b.choices[0].text, a.choices[0].text);
  assert.equal(b.usage.prompt_tokens, tok.tokens.length);
});

await check('n choices with a seed: reproducible, each its own stream', async () => {
  const req = { model: MODEL, messages, max_tokens: 10, temperature: 1.0, seed: 1234, n: 3 };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  const distinct = new Set(a.choices.map((c) => c.message.content));
  assert.ok(distinct.size > 1, `3 sampled choices were all identical: ${JSON.stringify([...distinct])}`);
  const s = await client.chat.completions.create({ ...req, stream: true });
  const texts = ['', '', ''];
  for await (const c of s) for (const ch of c.choices) texts[ch.index] += ch.delta.content ?? '';
  assert.deepEqual(texts, a.choices.map((c) => c.message.content));
});

await check('stop strings end the answer before the stop', async () => {
  const full = await client.completions.create({ model: MODEL, prompt: 'The sea', max_tokens: 24, temperature: 0, ignore_eos: true });
  const text = full.choices[0].text;
  // A stop string from the middle of the greedy answer (a few characters that first occur there).
  let k = Math.floor(text.length / 2);
  while (k < text.length - 2 && text.indexOf(text.slice(k, k + 2)) !== k) k += 1;
  assert.ok(k < text.length - 2, `no usable stop string in ${JSON.stringify(text)}`);
  const stop = text.slice(k, k + 2);
  const r = await client.completions.create({ model: MODEL, prompt: 'The sea', max_tokens: 24, temperature: 0, ignore_eos: true, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, text.slice(0, k));
});

await check('logprobs in OpenAI\'s shapes (chat and completions)', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the sampled token is the most likely one.
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5);
  }
  const c = await client.completions.create({ model: MODEL, prompt: 'The sea', max_tokens: 4, temperature: 0, logprobs: 2 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, c.usage.completion_tokens);
  assert.equal(lp.token_logprobs.length, lp.tokens.length);
  assert.equal(lp.text_offset.length, lp.tokens.length);
  assert.ok(Object.keys(lp.top_logprobs[0]).length >= 1);
});

await check('embeddings (base64, the client\'s default, and float)', async () => {
  const a = await client.embeddings.create({ model: MODEL, input: ['the sea', 'the sky'] });
  assert.equal(a.data.length, 2);
  const n = a.data[0].embedding.length;
  assert.ok(n > 0);
  const norm = Math.sqrt(a.data[0].embedding.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-3, `L2 norm ${norm}`);
  const f = await client.embeddings.create({ model: MODEL, input: 'the sea', encoding_format: 'float' });
  assert.deepEqual(f.data[0].embedding, a.data[0].embedding);
  assert.ok(a.usage.prompt_tokens > 0);
});

await check('errors: 400 / 404 / 401 as APIError, and 4xx are not retried', async () => {
  const { f, statuses } = countingFetch();
  const retrying = new OpenAI({ baseURL: BASE_URL, apiKey: API_KEY, maxRetries: 2, fetch: f });
  await assert.rejects(retrying.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 5 }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.type === 'invalid_request_error'
      && e.param === 'messages[0].content');
  assert.deepEqual(statuses, [400]);
  await assert.rejects(retrying.chat.completions.create({ model: MODEL, messages, response_format: { type: 'json_schema',
    json_schema: { name: 'x', schema: { type: 'object', properties: { id: { type: 'string', pattern: '^a' } } } } } }),
  (e) => e.status === 400 && e.param === 'response_format.json_schema.schema.properties.id.pattern'
    && /not supported by constrained decoding/.test(e.message));
  await assert.rejects(retrying.chat.completions.create({ model: 'no-such-model', messages }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  const wrongKey = new OpenAI({ baseURL: BASE_URL, apiKey: 'wrong', maxRetries: 2, fetch: f });
  await assert.rejects(wrongKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  assert.deepEqual(statuses, [400, 400, 404, 401]);
});

await check('response_format json_schema: the answer is a document of the schema, streamed or not', async () => {
  const schema = { type: 'object', properties: { color: { enum: ['red', 'green', 'blue'] }, ok: { type: 'boolean' },
    n: { type: 'array', items: { type: 'null' }, maxItems: 3 } }, required: ['color', 'ok', 'n'], additionalProperties: false };
  const response_format = { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } };
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 200, seed: 3, response_format });
  assert.equal(r.choices[0].finish_reason, 'stop');
  const doc = JSON.parse(r.choices[0].message.content);
  assert.ok(['red', 'green', 'blue'].includes(doc.color) && typeof doc.ok === 'boolean' && Array.isArray(doc.n), r.choices[0].message.content);
  const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 200, seed: 3, response_format, stream: true });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  assert.equal(text, r.choices[0].message.content);  // same seed, same tokens
  const o = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 60, temperature: 0,
    response_format: { type: 'json_object' } });
  const t = o.choices[0].message.content;
  assert.ok(t.trimStart().startsWith('{'), t);
  if (o.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(t), 'object');
});

await check('a client that aborts mid-stream: the server cancels and keeps serving', async () => {
  const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 400, ignore_eos: true, stream: true });
  let n = 0;
  for await (const c of stream) {
    n += 1;
    if (n === 3) {
      stream.controller.abort();
      break;
    }
  }
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 3, temperature: 0 });
  assert.equal(r.choices.length, 1);
});

if (BUSY_URL) {
  await check('a full queue is 503 with Retry-After, and the client retries it', async () => {
    const busy = new OpenAI({ baseURL: BUSY_URL, apiKey: 'x', maxRetries: 0 });
    // Fill the one slot and the one queue place with long answers; wait until both have started streaming.
    const long = { model: MODEL, messages, max_tokens: 100000, ignore_eos: true, stream: true };
    const s1 = await busy.chat.completions.create(long);
    const it1 = s1[Symbol.asyncIterator]();
    await it1.next();
    const s2promise = busy.chat.completions.create(long);
    await new Promise((r) => setTimeout(r, 300));
    const { f, statuses } = countingFetch();
    const retrying = new OpenAI({ baseURL: BUSY_URL, apiKey: 'x', maxRetries: 2, fetch: f });
    const raw = await fetch(BUSY_URL + '/chat/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages, max_tokens: 2 }),
    });
    assert.equal(raw.status, 503);
    assert.ok(Number(raw.headers.get('retry-after')) >= 1, `Retry-After: ${raw.headers.get('retry-after')}`);
    const body = await raw.json();
    assert.equal(body.error.type, 'server_error');
    // The client retries 503s: release the slot while it waits, so a retry can succeed.
    const pending = retrying.chat.completions.create({ model: MODEL, messages, max_tokens: 2 }).then((r) => r, (e) => e);
    await new Promise((r) => setTimeout(r, 200));
    s1.controller.abort();
    (await s2promise).controller.abort();
    const outcome = await pending;
    assert.equal(statuses[0], 503);
    assert.ok(statuses.length >= 2, `503 was not retried: ${statuses}`);
    assert.ok(!(outcome instanceof Error) || outcome.status === 503, `unexpected outcome ${outcome}`);
  });
}

console.log(`${passed} checks passed`);
