// ONNX Runtime (CPU, npm onnxruntime-node) latency of one ONNX model, reported with the same keys as
// `spore bench --json`. Used by bench/peers/infer_vs_ort.py; inputs are seeded random data.
//   node ort_bench.js MODEL.onnx --shape x:32,1,28,28 [--shape ...] --threads 1 --warmup 20 --iters 200 [--kernels]
//       [--native] [--input-npy x=FILE.npy] [--save-output DIR] [--profile-out FILE]
// The timed session never profiles (ORT's profiler records an event per node on every run): p50_ms... are the
// wall clock of `await session.run` on it, which includes Node's binding overhead (tens of us) and so is an upper
// bound on ORT's native time. --native adds a check from a second session, profiled and used only for that: ORT's
// own per-run "model_run" events (cat "Session", dur in us), warm-up runs dropped, as native_p50_ms /
// native_mean_ms; the profiler's per-node events make it an upper bound too (bench/peers/tv_vs_ort.py takes the
// smaller of the two per repeat). The sessions alternate in blocks so both see the same machine state.
// --input-npy feeds a .npy (float32, int64, int32 or bool; C order, little endian) instead of random data;
// --save-output writes every output as DIR/<name>.npy (float32).
// --profile-out writes the Chrome-trace profile of a second, profiled session (warm-up + as many runs as were
// timed) to FILE: per-node kernel times for bench/peers/layers_vs_ort.py.
// --kernels adds "kernels": the node kernels ORT ran in one run, counted from its profile (a second session with
// profiling on, not the timed one).
'use strict';
const ort = require('onnxruntime-node');
const fs = require('fs');
const os = require('os');
const path = require('path');

function parseArgs(argv) {
  const a = { model: null, shapes: {}, threads: 1, warmup: 20, iters: 200, timeS: 0, kernels: false,
    native: false, npy: {}, saveOutput: null };
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
    else if (k === '--native') a.native = true;
    else if (k === '--input-npy') {
      const v = argv[++i], j = v.indexOf('=');
      a.npy[v.slice(0, j)] = v.slice(j + 1);
    } else if (k === '--save-output') a.saveOutput = argv[++i];
    else if (k === '--profile-out') a.profileOut = argv[++i];
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

// Minimal .npy reader/writer: float32, little endian, C order (versions 1-3 headers).
function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const hstart = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', hstart, hstart + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const kinds = { '<f4': ['float32', Float32Array, 4], '<i8': ['int64', BigInt64Array, 8], '<i4': ['int32', Int32Array, 4],
    '|b1': ['bool', Uint8Array, 1] };
  if (!kinds[descr]) throw new Error(`${file}: dtype ${descr}, need <f4, <i8, <i4 or |b1`);
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const dims = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((x) => x.trim()).filter((x) => x).map(Number);
  const off = hstart + hlen, n = dims.reduce((x, y) => x * y, 1);
  const [type, Arr, size] = kinds[descr];
  if (buf.length < off + n * size) throw new Error(`${file}: ${buf.length - off} data bytes, shape needs ${n * size}`);
  const data = new Arr(n);
  for (let i = 0; i < n; i++) {
    const o = off + size * i;
    data[i] = size === 8 ? buf.readBigInt64LE(o) : type === 'int32' ? buf.readInt32LE(o) : size === 1 ? buf[o] : buf.readFloatLE(o);
  }
  return { type, dims, data };
}

function writeNpy(file, dims, data) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${dims.join(', ')}${dims.length === 1 ? ',' : ''}), }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const h = Buffer.alloc(10);
  h.write('\x93NUMPY', 0, 'latin1'); h[6] = 1; h[7] = 0; h.writeUInt16LE(header.length, 8);
  const body = Buffer.alloc(4 * data.length);
  for (let i = 0; i < data.length; i++) body.writeFloatLE(data[i], 4 * i);
  fs.writeFileSync(file, Buffer.concat([h, Buffer.from(header, 'latin1'), body]));
}

// Times `runs` calls of session.run on feeds; returns wall-clock ms per call.
async function timeRuns(session, feeds, a) {
  const times = [];
  const start = process.hrtime.bigint();
  for (let i = 0; ; i++) {
    const s = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - s) / 1e6);
    const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
    if (a.timeS > 0 ? elapsed >= a.timeS && i + 1 >= 10 : i + 1 >= a.iters) break;
  }
  return times;
}

const mean = (v) => v.reduce((x, y) => x + y, 0) / v.length;

async function main() {
  const a = parseArgs(process.argv);
  const opts = {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  };
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(a.model, opts);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const rnd = filler(1234);
  const feeds = {};
  let batch = 1;
  for (const name of session.inputNames) {
    if (a.npy[name]) {
      const t = readNpy(a.npy[name]);
      feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
      if (name === session.inputNames[0]) batch = t.dims.length ? t.dims[0] : 1;
      continue;
    }
    const dims = a.shapes[name];
    if (!dims) throw new Error(`no --shape or --input-npy for input '${name}' (inputs: ${session.inputNames.join(', ')})`);
    const n = dims.reduce((x, y) => x * y, 1);
    const data = new Float32Array(n);
    for (let i = 0; i < n; i++) data[i] = rnd();
    feeds[name] = new ort.Tensor('float32', data, dims);
    if (name === session.inputNames[0]) batch = dims[0];
  }
  for (let i = 0; i < a.warmup; i++) await session.run(feeds);
  const times = await timeRuns(session, feeds, a);
  if (a.saveOutput) {
    const out = await session.run(feeds);
    fs.mkdirSync(a.saveOutput, { recursive: true });
    for (const name of session.outputNames) {
      const t = out[name];
      writeNpy(path.join(a.saveOutput, `${name}.npy`), t.dims, Float32Array.from(t.data, Number));
    }
  }
  if (a.profileOut) {
    const profDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ort_prof_'));
    try {
      const ps = await ort.InferenceSession.create(a.model, Object.assign({}, opts, {
        enableProfiling: true, profileFilePrefix: path.join(profDir, 'prof') }));
      for (let i = 0; i < a.warmup + times.length; i++) await ps.run(feeds);
      ps.endProfiling();
      const files = fs.readdirSync(profDir).filter((f) => f.endsWith('.json'));
      if (files.length !== 1) throw new Error(`expected one profile file in ${profDir}, found ${files.length}`);
      fs.copyFileSync(path.join(profDir, files[0]), a.profileOut);
    } finally {
      fs.rmSync(profDir, { recursive: true, force: true });
    }
  }
  let native = null;
  if (a.native) {
    // The check: a second session with the profiler on, the same warm-up and run count, its model_run events.
    const profDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ort_native_'));
    try {
      const ps = await ort.InferenceSession.create(a.model, Object.assign({}, opts, {
        enableProfiling: true, profileFilePrefix: path.join(profDir, 'prof') }));
      for (let i = 0; i < a.warmup; i++) await ps.run(feeds);
      const n = times.length;
      for (let i = 0; i < n; i++) await ps.run(feeds);
      ps.endProfiling();
      const files = fs.readdirSync(profDir).filter((f) => f.endsWith('.json'));
      if (files.length !== 1) throw new Error(`expected one profile file in ${profDir}, found ${files.length}`);
      const events = JSON.parse(fs.readFileSync(path.join(profDir, files[0]), 'utf8'));
      const runs = events.filter((e) => e.cat === 'Session' && e.name === 'model_run').map((e) => e.dur / 1e3);
      native = runs.slice(a.warmup, a.warmup + n);
      if (native.length !== n) throw new Error(`profile has ${runs.length} model_run events, expected ${a.warmup + n}`);
      native.sort((x, y) => x - y);
    } finally {
      fs.rmSync(profDir, { recursive: true, force: true });
    }
  }
  times.sort((x, y) => x - y);
  const kernels = a.kernels ? await countKernels(a, feeds) : undefined;
  const m = mean(times);
  console.log(JSON.stringify({
    p50_ms: quantile(times, 0.5), p90_ms: quantile(times, 0.9), p99_ms: quantile(times, 0.99), mean_ms: m,
    throughput_per_s: batch / (m / 1e3), batch, threads: a.threads, runs: times.length, load_ms: loadMs,
    kernels,
    timing: 'js wall clock of an unprofiled session',
    native_p50_ms: native ? quantile(native, 0.5) : undefined,
    native_mean_ms: native ? mean(native) : undefined,
    native_timing: native ? 'ort model_run events of a second, profiled session' : undefined,
    peer: `onnxruntime-node ${require('onnxruntime-node/package.json').version}`,
  }));
}
main().catch((e) => { console.error(`ort_bench: ${e.message}`); process.exit(1); });
