// Regenerates js_reference.tsv: JavaScript's own number and date text for
// random doubles and instants, the reference tests/it/js_reference.rs checks.
// Usage: node tests/data/js_reference.js > tests/data/js_reference.tsv
const view = new DataView(new ArrayBuffer(8));
const bits = (x) => { view.setFloat64(0, x); return view.getBigUint64(0).toString(); };
function randomDouble() {
  const r = Math.random();
  if (r < 0.3) {
    for (let i = 0; i < 8; i++) view.setUint8(i, Math.floor(Math.random() * 256));
    return view.getFloat64(0);
  }
  if (r < 0.6) return (Math.random() - 0.5) * Math.pow(10, Math.floor(Math.random() * 50 - 25));
  if (r < 0.8) return Math.round((Math.random() - 0.5) * 1e6) / Math.pow(10, Math.floor(Math.random() * 7));
  return Math.floor((Math.random() - 0.5) * Math.pow(2, Math.floor(Math.random() * 70)));
}
const lines = [];
while (lines.length < 1500) {
  const x = randomDouble();
  if (!isFinite(x)) continue;
  const p = 1 + Math.floor(Math.random() * 21);
  lines.push(['number', bits(x), x.toString(), p, x.toPrecision(p)].join('\t'));
}
for (let i = 0; i < 500; i++) {
  const ms = Math.floor((Math.random() - 0.5) * 2 * 253402300799999 * 0.99);
  lines.push(['date', ms, new Date(ms).toISOString()].join('\t'));
}
console.log(lines.join('\n'));
