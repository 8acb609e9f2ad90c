// XState v5 on Node.js, measured the same way as the Python subjects (benchmarks/timing.py):
// per run a fresh actor (or initial snapshot), n events timed with performance.now() around the
// event loop only, the final state checked against the value Python computed, after one warm-up.
//
// One long-lived process answers requests, so that each XState run can be timed right beside
// the Python run of the same chart (a burst of load from elsewhere then falls on both):
// the first stdin line (JSON) is the spec {warmup, limits: {counter, shop, invoice}, cases:
//   [{name, config, events, n, kind, expect: {n, warmup, context, warmupContext}}]}, where kind
//   is "actor" or "pure", events are type strings or event objects, and a null context is not
//   checked; every case is built and warmed up, then {"ready": true} is written;
// each further line {"run": name} runs that case once: {"name", "n", "rate"} (events/s), or
//   {"error": message} when its check fails.
import { createInterface } from 'node:readline';
import { createMachine, createActor, assign, transition, initialTransition } from 'xstate';

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity })[Symbol.asyncIterator]();
const nextLine = async () => { const { value, done } = await lines.next(); return done ? null : value; };
const spec = JSON.parse(await nextLine());
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

const prepared = new Map();
for (const c of spec.cases) {
  const machine = createMachine(c.config, implementations);
  const events = c.events.map((e) => (typeof e === 'string' ? { type: e } : e));
  const run = c.kind === 'pure' ? runPure : runActor;
  const [, warm] = run(machine, events, spec.warmup);
  check(c.name, warm, c.expect.warmup, c.expect.warmupContext, spec.warmup);
  prepared.set(c.name, { c, machine, events, run });
}
console.log(JSON.stringify({ ready: true }));

for (let line = await nextLine(); line !== null; line = await nextLine()) {
  if (!line.trim()) continue;
  const { c, machine, events, run } = prepared.get(JSON.parse(line).run);
  try {
    const [ms, snapshot] = run(machine, events, c.n);
    check(c.name, snapshot, c.expect.n, c.expect.context, c.n);
    console.log(JSON.stringify({ name: c.name, n: c.n, rate: c.n / (ms / 1000) }));
  } catch (err) {
    console.log(JSON.stringify({ error: String(err.message || err) }));
  }
}
