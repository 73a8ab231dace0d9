// ONNX Runtime (CPU, npm onnxruntime-node) latency of one ONNX model, reported with the same keys as
// `spore bench --json`. Used by bench/peers/infer_vs_ort.py; inputs are seeded random data.
//   node ort_bench.js MODEL.onnx --shape x:32,1,28,28 [--shape ...] --threads 1 --warmup 20 --iters 200 [--kernels]
// --kernels adds "kernels": the node kernels ORT ran in one run, counted from its profile (a second session with
// profiling on, not the timed one).
'use strict';
const ort = require('onnxruntime-node');
const fs = require('fs');
const os = require('os');
const path = require('path');

function parseArgs(argv) {
  const a = { model: null, shapes: {}, threads: 1, warmup: 20, iters: 200, timeS: 0, kernels: false };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    if (k === '--shape') {
      const [name, dims] = argv[++i].split(':');
      a.shapes[name] = dims.split(',').map(Number);
    } else if (k === '--threads') a.threads = Number(argv[++i]);
    else if (k === '--warmup') a.warmup = Number(argv[++i]);
    else if (k === '--iters') a.iters = Number(argv[++i]);
    else if (k === '--time-s') a.timeS = Number(argv[++i]);
    else if (k === '--kernels') a.kernels = true;
    else if (!a.model) a.model = k;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.model) throw new Error('usage: node ort_bench.js MODEL.onnx --shape name:d0,d1,... [--threads N]');
  return a;
}

// xorshift32: deterministic inputs without a dependency.
function filler(seed) {
  let s = seed >>> 0 || 1;
  return () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
}

function quantile(sorted, q) {
  const pos = (sorted.length - 1) * q, lo = Math.floor(pos), hi = Math.ceil(pos);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

// Kernels per run from ORT's own profile: the "Node" events of one run ("<node>_kernel_time").
async function countKernels(a, feeds) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ort_prof_'));
  try {
    const s = await ort.InferenceSession.create(a.model, {
      intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all',
      enableProfiling: true, profileFilePrefix: path.join(dir, 'prof'),
    });
    await s.run(feeds);
    s.endProfiling();
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));
    if (files.length !== 1) throw new Error(`expected one profile file in ${dir}, found ${files.length}`);
    const events = JSON.parse(fs.readFileSync(path.join(dir, files[0]), 'utf8'));
    return events.filter((e) => e.cat === 'Node' && String(e.name).endsWith('_kernel_time')).length;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function main() {
  const a = parseArgs(process.argv);
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(a.model, {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const rnd = filler(1234);
  const feeds = {};
  let batch = 1;
  for (const name of session.inputNames) {
    const dims = a.shapes[name];
    if (!dims) throw new Error(`no --shape for input '${name}' (inputs: ${session.inputNames.join(', ')})`);
    const n = dims.reduce((x, y) => x * y, 1);
    const data = new Float32Array(n);
    for (let i = 0; i < n; i++) data[i] = rnd();
    feeds[name] = new ort.Tensor('float32', data, dims);
    batch = dims[0];
  }
  for (let i = 0; i < a.warmup; i++) await session.run(feeds);
  const times = [];
  const start = process.hrtime.bigint();
  for (let i = 0; ; i++) {
    const s = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - s) / 1e6);
    const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
    if (a.timeS > 0 ? elapsed >= a.timeS && i + 1 >= 10 : i + 1 >= a.iters) break;
  }
  times.sort((x, y) => x - y);
  const kernels = a.kernels ? await countKernels(a, feeds) : undefined;
  const mean = times.reduce((x, y) => x + y, 0) / times.length;
  console.log(JSON.stringify({
    p50_ms: quantile(times, 0.5), p90_ms: quantile(times, 0.9), p99_ms: quantile(times, 0.99), mean_ms: mean,
    throughput_per_s: batch / (mean / 1e3), batch, threads: a.threads, runs: times.length, load_ms: loadMs,
    kernels,
    peer: `onnxruntime-node ${require('onnxruntime-node/package.json').version}`,
  }));
}
main().catch((e) => { console.error(`ort_bench: ${e.message}`); process.exit(1); });
