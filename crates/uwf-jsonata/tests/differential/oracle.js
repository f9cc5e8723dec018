// The reference implementation as a line-oriented oracle for
// tests/differential.rs: one JSON request per stdin line,
// {"expr": "...", "data": <json>} (data absent = undefined), one JSON answer
// per stdout line: {"value": <json>} | {"undefined": true} | {"error": "<code>"}.
// Only the `jsonata` npm package is needed (NODE_PATH or a node_modules
// directory next to the caller's working directory).
'use strict';
const jsonata = require('jsonata');
const readline = require('readline');

const rl = readline.createInterface({ input: process.stdin, terminal: false });
const queue = [];
let busy = false;

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

async function drain() {
  if (busy) return;
  busy = true;
  while (queue.length) {
    const out = await answer(queue.shift());
    process.stdout.write(JSON.stringify(out) + '\n');
  }
  busy = false;
}

rl.on('line', (line) => {
  queue.push(line);
  drain();
});
