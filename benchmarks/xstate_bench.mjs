// XState v5 on Node.js, measured the same way as the Python subjects (benchmarks/timing.py):
// per run a fresh actor (or initial snapshot), n events timed with performance.now() around the
// event loop only, the final state checked against the value Python computed, after one warm-up.
//
// Input (stdin, JSON): {repeat, warmup, counterLimit, cases: [{name, config, events, n, kind,
//   expect: {n: value, warmup: value}}]} where kind is "actor" or "pure".
// Output (stdout): one JSON object per case: {name, n, rates: [events/s per run]}.
import { readFileSync } from 'node:fs';
import { createMachine, createActor, assign, transition, initialTransition } from 'xstate';

const spec = JSON.parse(readFileSync(0, 'utf8'));
const LIMIT = spec.counterLimit;

// The counter's implementations, the same as the Python side's.
const implementations = {
  guards: { notTooMany: ({ context }) => context.count < LIMIT },
  actions: { inc: assign({ count: ({ context }) => context.count + 1 }) },
};

function sameValue(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

function check(name, snapshot, expected, n) {
  if (!sameValue(snapshot.value, expected)) {
    throw new Error(`${name}: after ${n} events value ${JSON.stringify(snapshot.value)}, ` +
      `expected ${JSON.stringify(expected)}`);
  }
  if (snapshot.context && 'count' in snapshot.context && snapshot.context.count !== n) {
    throw new Error(`${name}: count ${snapshot.context.count} after ${n} events`);
  }
}

function runActor(machine, events, n) {
  const actor = createActor(machine).start();
  const k = events.length;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) actor.send(events[i % k]);
  const ms = performance.now() - t0;
  const snapshot = actor.getSnapshot();
  actor.stop();
  return [ms, snapshot];
}

function runPure(machine, events, n) {
  let [snapshot] = initialTransition(machine);
  const k = events.length;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) [snapshot] = transition(machine, snapshot, events[i % k]);
  return [performance.now() - t0, snapshot];
}

for (const c of spec.cases) {
  const machine = createMachine(c.config, implementations);
  const events = c.events.map((type) => ({ type }));
  const run = c.kind === 'pure' ? runPure : runActor;
  const [, warm] = run(machine, events, spec.warmup);
  check(c.name, warm, c.expect.warmup, spec.warmup);
  const rates = [];
  for (let r = 0; r < spec.repeat; r++) {
    const [ms, snapshot] = run(machine, events, c.n);
    check(c.name, snapshot, c.expect.n, c.n);
    rates.push(c.n / (ms / 1000));
  }
  console.log(JSON.stringify({ name: c.name, n: c.n, rates }));
}
