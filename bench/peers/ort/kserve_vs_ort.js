// spore serve's KServe v2 endpoint vs ONNX Runtime in-process (npm onnxruntime-node), same model file and input,
// at several numbers of concurrent clients: throughput (inferences/s) and latency p50/p99.
//   node kserve_vs_ort.js MODEL.onnx --input x=FILE.npy --spore build/spore [--clients 1,2,4,8] [--threads 2]
//       [--seconds 5] [--batching auto|on|off] [--batch-delay-ms D] [--json OUT]
// The peer is what a user would otherwise write: one ORT session (intra-op threads = --threads, its fastest
// settings: graph optimizations all, sequential execution) shared by C closed-loop async callers in one process, no
// HTTP. spore is timed end to end over HTTP on loopback: a Node client per caller POSTs the input as binary tensor
// data (Inference-Header-Content-Length) and reads the binary output. Both get a warm-up of 2 s first. The server's
// dynamic batching follows --batching (auto: only when it proved bit-identical at warm-up).
'use strict';
const ort = require('onnxruntime-node');
const fs = require('fs');
const http = require('http');
const path = require('path');
const { spawn } = require('child_process');

function args(argv) {
  const a = { model: null, input: null, spore: null, clients: [1, 2, 4, 8], threads: 2, seconds: 5, batching: 'auto',
    json: null };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    if (k === '--input') a.input = argv[++i];
    else if (k === '--spore') a.spore = argv[++i];
    else if (k === '--clients') a.clients = argv[++i].split(',').map(Number);
    else if (k === '--threads') a.threads = Number(argv[++i]);
    else if (k === '--seconds') a.seconds = Number(argv[++i]);
    else if (k === '--batching') a.batching = argv[++i];
    else if (k === '--batch-delay-ms') a.delay = argv[++i];
    else if (k === '--json') a.json = argv[++i];
    else if (!a.model) a.model = k;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.model || !a.input || !a.spore) throw new Error('usage: kserve_vs_ort.js MODEL.onnx --input x=FILE.npy --spore BIN');
  return a;
}

// A float32 C-order .npy: { shape, data: Float32Array }.
function readNpy(file) {
  const b = fs.readFileSync(file);
  const hlen = b.readUInt16LE(8);
  const header = b.slice(10, 10 + hlen).toString('latin1');
  if (!header.includes("'<f4'")) throw new Error(`${file}: only float32 .npy is supported`);
  const shape = header.match(/\(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const off = 10 + hlen;
  const data = new Float32Array(b.buffer.slice(b.byteOffset + off, b.byteOffset + b.length));
  return { shape, data };
}

const pct = (v, p) => { const s = [...v].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.round(p / 100 * (s.length - 1)))]; };

async function closedLoop(clients, seconds, call) {
  const lat = [];
  const end = Date.now() + seconds * 1000;
  const t0 = process.hrtime.bigint();
  await Promise.all(Array.from({ length: clients }, async () => {
    while (Date.now() < end) {
      const s = process.hrtime.bigint();
      await call();
      lat.push(Number(process.hrtime.bigint() - s) / 1e6);
    }
  }));
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  return { clients, per_s: lat.length / wall, p50_ms: pct(lat, 50), p99_ms: pct(lat, 99), n: lat.length };
}

function post(port, pathName, headers, body) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: pathName, method: 'POST', headers, agent: keepAlive },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => (res.statusCode === 200 ? resolve(Buffer.concat(chunks))
          : reject(new Error(`HTTP ${res.statusCode}: ${Buffer.concat(chunks).toString().slice(0, 300)}`))));
      });
    req.on('error', reject);
    req.end(body);
  });
}
const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 64 });

async function main() {
  const a = args(process.argv);
  const [inName, inFile] = a.input.split('=');
  const x = readNpy(inFile);
  const results = { model: a.model, input: a.input, threads: a.threads, ort: [], spore: [] };

  // ORT in-process
  const sess = await ort.InferenceSession.create(a.model, { intraOpNumThreads: a.threads, interOpNumThreads: 1,
    graphOptimizationLevel: 'all', executionMode: 'sequential' });
  const feeds = { [inName]: new ort.Tensor('float32', x.data, x.shape) };
  await closedLoop(1, 2, () => sess.run(feeds));
  for (const c of a.clients) {
    const r = await closedLoop(c, a.seconds, () => sess.run(feeds));
    results.ort.push(r);
    console.log(`ORT in-process  clients ${c}: ${r.per_s.toFixed(1)}/s  p50 ${r.p50_ms.toFixed(2)} ms  p99 ${r.p99_ms.toFixed(2)} ms`);
  }
  await sess.release();

  // spore serve, KServe binary tensors over loopback HTTP
  const name = path.basename(a.model).replace(/\.onnx$/, '');
  const srv = spawn(a.spore, ['serve', a.model, '--port', '0', '--threads', String(a.threads), '--batching', a.batching,
    '--no-access-log', ...(a.delay !== undefined ? ['--batch-delay-ms', a.delay] : [])], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    let out = '';
    srv.stdout.on('data', (d) => { out += d; const m = out.match(/listening on http:\/\/[^:]+:(\d+)/); if (m) resolve(Number(m[1])); });
    srv.on('exit', (code) => reject(new Error(`spore serve exited with ${code}`)));
  });
  for (;;) {  // until /health is 200
    const ok = await new Promise((res) => http.get({ host: '127.0.0.1', port, path: '/health' }, (r) => { r.resume(); res(r.statusCode === 200); }).on('error', () => res(false)));
    if (ok) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const bytes = Buffer.from(x.data.buffer, x.data.byteOffset, x.data.byteLength);
  const header = Buffer.from(JSON.stringify({ inputs: [{ name: inName, shape: x.shape, datatype: 'FP32',
    parameters: { binary_data_size: bytes.length } }], parameters: { binary_data_output: true } }));
  const body = Buffer.concat([header, bytes]);
  const headers = { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': header.length,
    'Content-Length': body.length };
  const call = () => post(port, `/v2/models/${name}/infer`, headers, body);
  await closedLoop(1, 2, call);
  for (const c of a.clients) {
    const r = await closedLoop(c, a.seconds, call);
    results.spore.push(r);
    console.log(`spore KServe    clients ${c}: ${r.per_s.toFixed(1)}/s  p50 ${r.p50_ms.toFixed(2)} ms  p99 ${r.p99_ms.toFixed(2)} ms`);
  }
  srv.kill('SIGTERM');
  for (let i = 0; i < a.clients.length; i++)
    console.log(`clients ${a.clients[i]}: spore/ORT throughput ${(results.spore[i].per_s / results.ort[i].per_s).toFixed(2)}x, ` +
      `p99 ${results.spore[i].p99_ms.toFixed(1)} vs ${results.ort[i].p99_ms.toFixed(1)} ms`);
  if (a.json) fs.writeFileSync(a.json, JSON.stringify(results, null, 1));
}

main().catch((e) => { console.error(e.message || e); process.exit(1); });
