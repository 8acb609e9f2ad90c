import { JSDOM } from 'jsdom';
import fs from 'fs';
const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window; globalThis.document = dom.window.document;
try { globalThis.navigator = dom.window.navigator; } catch {}
const { default: mermaid } = await import('mermaid');
let bad = 0;
for (const f of process.argv.slice(2)) {
  const text = fs.readFileSync(f, 'utf8');
  try { const r = await mermaid.parse(text); console.log('OK', f, JSON.stringify(r)); }
  catch (e) { bad++; console.log('FAIL', f, String(e.message || e).slice(0, 500)); }
}
process.exit(bad ? 1 : 0);
