// ONNX Runtime (npm onnxruntime-node, CPU, default session options; $IPJ_ORT_THREADS sets intra-op threads,
// IPJ_ORT_SPIN=0 turns off their spinning) latency
// of one model per batch size: warm-up, then session.run calls for `seconds`; prints one JSON line {"rows": [{"batch",
// "p50_ms", "mean_ms", "runs", "cpu_ms_per_run"}]} (cpu: user + system time of the whole process, spinning included).
// Usage: node bench/onnxruntime_bench.js MODEL.onnx 1,64,256 [seconds=2]   (package dir: $IPJ_ONNXRUNTIME_NODE or
// ./node_modules/onnxruntime-node, installed by scripts/install-onnxruntime.sh)
const path = require('path');
// $IPJ_ONNXRUNTIME_NODE: the package folder or a node_modules folder holding it (as ipj export reads it).
const packageDir = (folder) => (path.basename(folder) === 'node_modules' ? path.join(folder, 'onnxruntime-node') : folder);
const ort = require(packageDir(path.resolve(process.env.IPJ_ONNXRUNTIME_NODE || 'node_modules')));
const [, , modelPath, batchList, secondsText] = process.argv;
(async () => {
  const threads = Number(process.env.IPJ_ORT_THREADS || 0);
  const options = threads > 0 ? {intraOpNumThreads: threads} : {};
  // IPJ_ORT_SPIN=0: intra-op workers sleep between parallel regions instead of spinning (ORT's default is to spin)
  if (process.env.IPJ_ORT_SPIN === '0') options.extra = {session: {intra_op: {allow_spinning: '0'}}};
  const session = await ort.InferenceSession.create(modelPath, options);
  const input = session.inputNames[0];
  const sample = JSON.parse(process.env.IPJ_SAMPLE_SHAPE || '[1,28,28]');
  const rows = [];
  for (const batch of batchList.split(',').map(Number)) {
    const shape = [batch, ...sample];
    const data = Float32Array.from({length: shape.reduce((a, b) => a * b)}, () => Math.floor(Math.random() * 256) / 255);
    const feeds = {[input]: new ort.Tensor('float32', data, shape)};
    for (let i = 0; i < 5; ++i) await session.run(feeds);
    const times = [];
    const cpuStart = process.cpuUsage();
    const end = Date.now() + 1000 * Number(secondsText || 2);
    while (Date.now() < end || times.length < 5) {
      const start = process.hrtime.bigint();
      await session.run(feeds);
      times.push(Number(process.hrtime.bigint() - start) / 1e6);
    }
    const cpu = process.cpuUsage(cpuStart);
    times.sort((a, b) => a - b);
    rows.push({batch, p50_ms: times[Math.floor(times.length / 2)], mean_ms: times.reduce((a, b) => a + b) / times.length,
               runs: times.length, cpu_ms_per_run: (cpu.user + cpu.system) / 1000 / times.length});
  }
  console.log(JSON.stringify({runtime: 'onnxruntime-node ' + ort.env.versions.node, rows}));
})().catch((error) => { console.error(error); process.exit(1); });
