// XState v5 on Node.js, measured the same way as the Python subjects (benchmarks/timing.py):
// per run a fresh actor (or initial snapshot), n events timed with performance.now() around the
// event loop only, the final state checked against the value Python computed, after one warm-up.
//
// Input (stdin, JSON): {repeat, warmup, limits: {counter, shop, invoice}, cases: [{name, config,
//   events, n, kind, expect: {n, warmup, context, warmupContext}}]} where kind is "actor" or
//   "pure", events are type strings or event objects, and a null context is not checked.
// Output (stdout): one JSON object per case: {name, n, rates: [events/s per run]}.
import { readFileSync } from 'node:fs';
import { createMachine, createActor, assign, transition, initialTransition } from 'xstate';

const spec = JSON.parse(readFileSync(0, 'utf8'));
const LIMITS = spec.limits;
const nothing = () => {};

// The charts' implementations, the same functions as benchmarks/charts.py's.
const implementations = {
  guards: {
    notTooMany: ({ context }) => context.count < LIMITS.counter,
    inStock: ({ context }) => context.items < LIMITS.shop,
    hasItems: ({ context }) => context.items > 0,
    orderIsValid: ({ context }) => context.amount > 0,
    canRetry: ({ context }) => context.attempts < LIMITS.invoice,
  },
  actions: {
    inc: assign({ count: ({ context }) => context.count + 1 }),
    enterState: nothing, exitState: nothing,
    showCatalog: nothing, showCart: nothing, hideCart: nothing, sendReceipt: nothing,
    startCall: nothing, endCall: nothing,
    addItem: assign({ items: ({ context }) => context.items + 1,
                      total: ({ context, event }) => context.total + event.price }),
    removeItem: assign({ items: ({ context }) => context.items - 1,
                         total: ({ context, event }) => context.total - event.price }),
    placeOrder: assign({ orders: ({ context }) => context.orders + 1 }),
    clearCart: assign({ items: 0, total: 0 }),
    takeOrder: assign({ orders: ({ context }) => context.orders + 1,
                        amount: ({ event }) => event.amount }),
    rememberCustomer: assign({ customer: ({ event }) => event.customer }),
    countAttempt: assign({ attempts: ({ context }) => context.attempts + 1 }),
    rememberInvoice: assign({ invoice: ({ event }) => event.invoice }),
    countSent: assign({ sent: ({ context }) => context.sent + 1 }),
    reset: assign({ customer: null, invoice: null, attempts: 0 }),
  },
};

// JSON with sorted keys, so that values and contexts compare whatever their key order.
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value === undefined ? null : value);
}

function check(name, snapshot, expected, context, n) {
  if (canonical(snapshot.value) !== canonical(expected)) {
    throw new Error(`${name}: after ${n} events value ${JSON.stringify(snapshot.value)}, ` +
      `expected ${JSON.stringify(expected)}`);
  }
  if (context !== null && canonical(snapshot.context) !== canonical(context)) {
    throw new Error(`${name}: after ${n} events context ${JSON.stringify(snapshot.context)}, ` +
      `expected ${JSON.stringify(context)}`);
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
  const events = c.events.map((e) => (typeof e === 'string' ? { type: e } : e));
  const run = c.kind === 'pure' ? runPure : runActor;
  const [, warm] = run(machine, events, spec.warmup);
  check(c.name, warm, c.expect.warmup, c.expect.warmupContext, spec.warmup);
  const rates = [];
  for (let r = 0; r < spec.repeat; r++) {
    const [ms, snapshot] = run(machine, events, c.n);
    check(c.name, snapshot, c.expect.n, c.expect.context, c.n);
    rates.push(c.n / (ms / 1000));
  }
  console.log(JSON.stringify({ name: c.name, n: c.n, rates }));
}
