// BullMQ side of bench/peers: measures one figure on a Redis at 127.0.0.1:PORT and prints one JSON line.
//
//   node bullmq.mjs submit   --port P [--jobs 20000] [--batch 100]
//   node bullmq.mjs drain    --port P [--jobs 20000] [--batch 100] [--concurrency 100]
//   node bullmq.mjs lateness --port P [--jobs 5000] [--batch 100] [--concurrency 100] [--span 5] [--lead 20]
//
// submit:   Queue.addBulk in batches, no worker            -> {"jobs_per_s", "elapsed_s"}
// drain:    a Worker runs while the jobs are added;
//           first add to last completion                  -> {"jobs_per_s", "elapsed_s"}
// lateness: jobs due evenly over SPAN s starting LEAD s from
//           now, added in advance with `delay`; a Worker
//           runs them                                      -> {"lateness_ms": [processedOn - due, ...],
//                                                              "accepted_before_due_s"}
// (job.delay is reset to 0 when a delayed job is promoted; job.opts.delay keeps it.)
// Every job is a no-op with removeOnComplete; the database is flushed first (bench/peers/compare.py
// owns the Redis server).
import { parseArgs } from "node:util";
import { Queue, Worker } from "bullmq";

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    port: { type: "string" },
    jobs: { type: "string", default: "20000" },
    batch: { type: "string", default: "100" },
    concurrency: { type: "string", default: "100" },
    span: { type: "string", default: "5" },
    lead: { type: "string", default: "20" },
  },
});
const opts = Object.fromEntries(Object.entries(values).map(([k, v]) => [k, Number(v)]));
const connection = { host: "127.0.0.1", port: opts.port };
const QUEUE = "peers";

// Add opts.jobs no-op jobs in batches of opts.batch; jobOpts(i) gives job i's options.
async function addAll(queue, jobOpts) {
  for (let first = 0; first < opts.jobs; first += opts.batch) {
    const bulk = [];
    for (let i = first; i < Math.min(opts.jobs, first + opts.batch); i++) {
      bulk.push({ name: "noop", data: {}, opts: { removeOnComplete: true, ...jobOpts(i) } });
    }
    await queue.addBulk(bulk);
  }
}

// A started Worker with a no-op async processor; onCompleted(job) is called for every job done,
// and the returned promise resolves once it has been called opts.jobs times.
function runWorker(onCompleted) {
  let done = 0;
  let resolve;
  const finished = new Promise((r) => (resolve = r));
  const worker = new Worker(QUEUE, async () => {}, { connection, concurrency: opts.concurrency });
  worker.on("completed", (job) => {
    onCompleted(job);
    if (++done === opts.jobs) resolve();
  });
  return { worker, finished };
}

async function submit(queue) {
  const t0 = Date.now();
  await addAll(queue, () => ({}));
  const elapsed = (Date.now() - t0) / 1000;
  return { jobs_per_s: opts.jobs / elapsed, elapsed_s: elapsed };
}

async function drain(queue) {
  let last = 0;
  const { worker, finished } = runWorker(() => (last = Date.now()));
  await worker.waitUntilReady();
  const t0 = Date.now();
  await addAll(queue, () => ({}));
  await finished;
  await worker.close();
  const elapsed = (last - t0) / 1000;
  return { jobs_per_s: opts.jobs / elapsed, elapsed_s: elapsed };
}

async function lateness(queue) {
  const late = [];
  const { worker, finished } = runWorker((job) => late.push(job.processedOn - (job.timestamp + job.opts.delay)));
  await worker.waitUntilReady();
  const first = Date.now() + opts.lead * 1000;
  const step = (opts.span * 1000) / opts.jobs;
  await addAll(queue, (i) => {
    const now = Date.now();
    return { timestamp: now, delay: Math.max(0, Math.round(first + i * step) - now) };
  });
  const accepted = Date.now();
  await finished;
  await worker.close();
  return { lateness_ms: late, accepted_before_due_s: (first - accepted) / 1000 };
}

const figures = { submit, drain, lateness };
if (!(positionals[0] in figures) || !opts.port) {
  console.error(`usage: node bullmq.mjs {${Object.keys(figures).join(",")}} --port PORT [options]`);
  process.exit(2);
}
const queue = new Queue(QUEUE, { connection });
await (await queue.client).flushdb();
const result = await figures[positionals[0]](queue);
await queue.close();
console.log(JSON.stringify(result));
