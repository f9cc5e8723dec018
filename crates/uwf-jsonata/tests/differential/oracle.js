// The reference implementation as a line-oriented oracle for
// tests/it/differential.rs: one JSON request per stdin line,
// {"expr": "...", "data": <json>} (data absent = undefined), one JSON answer
// per stdout line: {"value": <json>} | {"undefined": true} | {"error": "<code>"}.
// Only the `jsonata` npm package is needed (NODE_PATH or a node_modules
// directory next to the caller's working directory).
//
// Each expression is evaluated in a worker thread with a time and memory
// limit: some inputs make jsonata-js loop forever or exhaust its heap (e.g.
// `false / ($replace("hello", /a,b/, "L") ?: 1)` never finishes parsing).
// Then the worker is replaced and the answer is an `internal:` error, which
// the test counts as "the reference crashed", like a JavaScript TypeError.
'use strict';
const { Worker, isMainThread, parentPort } = require('worker_threads');

const TIME_LIMIT_MS = 5000;

if (!isMainThread) {
  const jsonata = require('jsonata');

  function plain(v) {
    if (typeof v === 'number' && !isFinite(v)) return { '$nonfinite': String(v) };
    // Functions and regexes are not JSON: mark them so the comparison can say so.
    if (typeof v === 'function') return { '$function': true };
    if (v instanceof RegExp) return { '$regex': true };
    if (Array.isArray(v)) return v.filter((x) => x !== undefined).map(plain);
    if (v !== null && typeof v === 'object') {
      if (v._jsonata_lambda || v._jsonata_function) return { '$function': true };
      const o = {};
      for (const k of Object.keys(v)) if (v[k] !== undefined) o[k] = plain(v[k]);
      return o;
    }
    return v;
  }

  async function answer(line) {
    let req;
    try {
      req = JSON.parse(line);
    } catch (e) {
      return { error: 'bad-request' };
    }
    try {
      const expr = jsonata(req.expr);
      const result = await expr.evaluate('data' in req ? req.data : undefined);
      if (result === undefined) return { undefined: true };
      return { value: plain(result) };
    } catch (e) {
      return { error: e && e.code ? e.code : 'internal: ' + String(e && e.message) };
    }
  }

  parentPort.on('message', async (line) => {
    parentPort.postMessage(await answer(line));
  });
} else {
  const readline = require('readline');
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  const queue = [];
  let worker = null;
  let pending = null; // { resolve }

  function startWorker() {
    const w = new Worker(__filename, { resourceLimits: { maxOldGenerationSizeMb: 512 } });
    worker = w;
    w.on('message', (out) => finish(out));
    w.on('error', (e) => {
      if (worker === w) worker = null;
      finish({ error: 'internal: ' + String(e && e.message) });
    });
    w.on('exit', () => {
      if (worker === w) worker = null;
      finish({ error: 'internal: the evaluating worker exited' });
    });
  }

  function finish(out) {
    if (pending) {
      const p = pending;
      pending = null;
      p.resolve(out);
    }
  }

  function evaluate(line) {
    return new Promise((resolve) => {
      pending = { resolve };
      const timer = setTimeout(() => {
        const w = worker;
        worker = null;
        finish({ error: 'internal: no answer within ' + TIME_LIMIT_MS + ' ms' });
        w.removeAllListeners();
        w.terminate();
      }, TIME_LIMIT_MS);
      const done = pending.resolve;
      pending.resolve = (out) => {
        clearTimeout(timer);
        done(out);
      };
      if (!worker) startWorker();
      worker.postMessage(line);
    });
  }

  let busy = false;
  async function drain() {
    if (busy) return;
    busy = true;
    while (queue.length) {
      const out = await evaluate(queue.shift());
      process.stdout.write(JSON.stringify(out) + '\n');
    }
    busy = false;
    if (closed && worker) worker.terminate();
  }

  let closed = false;
  rl.on('line', (line) => {
    queue.push(line);
    drain();
  });
  rl.on('close', () => {
    closed = true;
    if (!busy && worker) worker.terminate();
  });
}
