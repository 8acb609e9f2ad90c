// Prints, as one JSON line per file, the texts the real Mermaid library takes from a state
// diagram: each state's description lines and each arrow's label, with Mermaid's entity
// codes ("#35;") turned back into characters as Mermaid does when it draws them.
import { JSDOM } from 'jsdom';
import fs from 'fs';
const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window; globalThis.document = dom.window.document;
try { globalThis.navigator = dom.window.navigator; } catch {}
const { default: mermaid } = await import('mermaid');
const decode = (text) => {
  // mermaidAPI's decodeEntities, then the browser's reading of the HTML entity
  const html = text.replace(/ﬂ°°/g, '&#').replace(/ﬂ°/g, '&').replace(/¶ß/g, ';');
  const area = document.createElement('textarea');
  area.innerHTML = html;
  return area.value;
};
for (const f of process.argv.slice(2)) {
  const text = fs.readFileSync(f, 'utf8');
  await mermaid.parse(text);
  const db = (await mermaid.mermaidAPI.getDiagramFromText(text)).db;
  const states = {};
  for (const [id, state] of db.getStates()) states[id] = state.descriptions.map(decode);
  const arrows = db.getRelations().map((r) => [r.id1, r.id2, decode(r.relationTitle || '')]);
  console.log(JSON.stringify({ states, arrows }));
}
