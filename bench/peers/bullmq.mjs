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
// owns the Redis server). The Worker (concurrency 100, a no-op async processor) runs in a child
// process of its own, `bullmq.mjs work`, as workers run beside a producing service; epochq's engine
// likewise runs in a process of its own beside the submitting client.
import { fork } from "node:child_process";
import { on } from "node:events";
import { fileURLToPath } from "node:url";
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
    record: { type: "string", default: "last" }, // work: "last" completion time, or "lateness" of each job
  },
});
const opts = Object.fromEntries(Object.entries(values).map(([k, v]) => [k, k === "record" ? v : Number(v)]));
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

// A `work` child process; resolves once its Worker is connected, with a promise of its report.
async function startWorker(record) {
  const args = ["work", `--port=${opts.port}`, `--jobs=${opts.jobs}`, `--concurrency=${opts.concurrency}`,
    `--record=${record}`];
  const child = fork(fileURLToPath(import.meta.url), args);
  child.on("exit", (code) => code && process.exit(1)); // its error is on stderr already
  const inbox = on(child, "message");
  await inbox.next(); // "ready"
  return { report: inbox.next().then(({ value: [message] }) => message) };
}

// In the child: run opts.jobs jobs with a no-op async processor, then send what opts.record asks for.
async function work() {
  let last = 0;
  const late = [];
  let resolve;
  const finished = new Promise((r) => (resolve = r));
  const worker = new Worker(QUEUE, async () => {}, { connection, concurrency: opts.concurrency });
  worker.on("completed", (job) => {
    last = Date.now();
    late.push(job.processedOn - (job.timestamp + job.opts.delay));
    if (late.length === opts.jobs) resolve();
  });
  await worker.waitUntilReady();
  process.send("ready");
  await finished;
  await worker.close();
  process.send(opts.record === "last" ? { last } : { lateness_ms: late });
  process.disconnect();
}

async function submit(queue) {
  const t0 = Date.now();
  await addAll(queue, () => ({}));
  const elapsed = (Date.now() - t0) / 1000;
  return { jobs_per_s: opts.jobs / elapsed, elapsed_s: elapsed };
}

async function drain(queue) {
  const { report } = await startWorker("last");
  const t0 = Date.now();
  await addAll(queue, () => ({}));
  const elapsed = ((await report).last - t0) / 1000;
  return { jobs_per_s: opts.jobs / elapsed, elapsed_s: elapsed };
}

async function lateness(queue) {
  const { report } = await startWorker("lateness");
  const first = Date.now() + opts.lead * 1000;
  const step = (opts.span * 1000) / opts.jobs;
  await addAll(queue, (i) => {
    const now = Date.now();
    return { timestamp: now, delay: Math.max(0, Math.round(first + i * step) - now) };
  });
  const accepted = Date.now();
  return { lateness_ms: (await report).lateness_ms, accepted_before_due_s: (first - accepted) / 1000 };
}

const figures = { submit, drain, lateness };
if (positionals[0] === "work") {
  await work();
} else if (positionals[0] in figures && opts.port) {
  const queue = new Queue(QUEUE, { connection });
  await (await queue.client).flushdb();
  const result = await figures[positionals[0]](queue);
  await queue.close();
  console.log(JSON.stringify(result));
} else {
  console.error(`usage: node bullmq.mjs {${Object.keys(figures).join(",")}} --port PORT [options]`);
  process.exit(2);
}
