#!/usr/bin/env node
// A remote epochq worker in Node.js (docs/workers.md): it reads the attempts the engines dispatch to its
// pool, runs each with a handler of HANDLERS, heartbeats the fencing tokens of the attempts it runs (what
// renews their leases) with their progress, stops one on the owner's cancel, and reports each result as a
// ReportAttempt command (Avro single-object encoding, the newest schemas/vN/command.avsc) keyed by the job
// id, with the records its handler produced, signed where a key file is given.
//
// It reads its partitions all the time, full or not (a cancel must reach it while every slot is busy): a
// dispatch it has no slot for yet is held in arrival order, and each partition's offset is committed no further
// than the first record it holds, so a worker that dies leaves those to the next reader.
//
//   node worker.js BOOTSTRAP NAMESPACE POOL [--worker-id ID] [--concurrency N] [--schemas DIR] [--key-file PEM]
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');
const avro = require('avsc');
const lz4 = require('lz4js');
const { CompressionCodecs, CompressionTypes, Kafka, Partitioners, logLevel } = require('kafkajs');

// Engines write dispatches LZ4-compressed; KafkaJS ships no LZ4 codec: lz4js (pure JS) reads the frames.
CompressionCodecs[CompressionTypes.LZ4] = () => ({
  compress: async (encoder) => Buffer.from(lz4.compress(encoder.buffer)),
  decompress: async (buffer) => Buffer.from(lz4.decompress(buffer)),
});

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The handlers, by task type: each takes (ctx, payload) and returns a JSON-able result, or throws. ctx has
// jobId, attempt, fencingToken, tenant; cancelled (true once the owner asked the attempt to stop: return or
// throw soon); progress(value, message) (0..1, sent with the next heartbeat); produce(topic, value, {key,
// headers}) (written by the owner with the job's success, exactly once; none if the attempt fails).
const HANDLERS = {
  'remote.echo': async (ctx, payload) => ({ echo: payload, lang: 'node', pid: process.pid, token: ctx.fencingToken }),
  'remote.slow': async (ctx, payload) => {
    const seconds = Number(payload.seconds || 0);
    for (let s = 1; s <= seconds; s++) {
      await sleep(1000);
      ctx.progress(s / seconds, `second ${s} of ${seconds}`);
    }
    return { attempt: ctx.attempt, lang: 'node', pid: process.pid };
  },
  'remote.emit': async (ctx, payload) => {
    ctx.produce(payload.topic, `attempt ${ctx.attempt}`, { key: ctx.jobId, headers: { token: String(ctx.fencingToken) } });
    return { attempt: ctx.attempt };
  },
  'remote.until_cancelled': async (ctx) => { // runs until asked to stop (at most 60 s)
    const end = Date.now() + 60000;
    while (Date.now() < end && !ctx.cancelled) await sleep(50);
    if (ctx.cancelled) throw Object.assign(new Error('cancelled'), { name: 'Cancelled' });
  },
};

// CRC-64-AVRO (Rabin), as in the Avro specification; written little-endian into the header.
const EMPTY = 0xc15d213aa4d7a795n;
const TABLE = Array.from({ length: 256 }, (_, i) => {
  let fp = BigInt(i);
  for (let j = 0; j < 8; j++) fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n));
  return fp;
});
function crc64Avro(text) {
  let fp = EMPTY;
  for (const byte of Buffer.from(text, 'utf8')) fp = (fp >> 8n) ^ TABLE[Number((fp ^ BigInt(byte)) & 0xffn)];
  return fp;
}

function latestCommandSchema(root) {
  const versions = fs.readdirSync(root).filter((d) => /^v\d+$/.test(d))
    .filter((d) => fs.existsSync(path.join(root, d, 'command.avsc')))
    .sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
  const text = fs.readFileSync(path.join(root, versions.at(-1), 'command.avsc'), 'utf8');
  return { text, version: Number(versions.at(-1).slice(1)) };
}

function singleObjectEncoder(text) {
  const type = avro.Type.forSchema(JSON.parse(text), { wrapUnions: true });
  const header = Buffer.alloc(10);
  header.writeUInt16BE(0xc301, 0);
  header.writeBigUInt64LE(crc64Avro(JSON.stringify(type.schema())), 2); // the Parsing Canonical Form's
  const encode = (value) => Buffer.concat([header, type.toBuffer(value)]);
  encode.fingerprint = header.subarray(2).toString('hex');
  return encode;
}

function parseArgs(argv) {
  const positional = [];
  const opts = { workerId: `node-worker-${os.hostname()}-${process.pid}`, concurrency: 4,
    schemas: path.resolve(__dirname, '../../../schemas'), keyFile: process.env.EPOCHQ_OPERATOR_KEY_FILE };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--worker-id') opts.workerId = argv[++i];
    else if (argv[i] === '--concurrency') opts.concurrency = Number(argv[++i]);
    else if (argv[i] === '--schemas') opts.schemas = argv[++i];
    else if (argv[i] === '--key-file') opts.keyFile = argv[++i];
    else positional.push(argv[i]);
  }
  if (positional.length !== 3) throw new Error('usage: worker.js BOOTSTRAP NAMESPACE POOL [--worker-id ID] [--concurrency N]');
  const [bootstrap, namespace, pool] = positional;
  return { bootstrap, namespace, pool, ...opts };
}

// A result's signature (docs/security.md): Ed25519 over "epochq-command-v1" 0 <topic> 0 <the record's value>.
function signer(keyFile, topic) {
  if (!keyFile) return () => ({});
  const key = crypto.createPrivateKey(fs.readFileSync(keyFile));
  const prefix = Buffer.concat([Buffer.from('epochq-command-v1\0'), Buffer.from(topic), Buffer.from([0])]);
  return (value) => ({ 'epochq-signature': crypto.sign(null, Buffer.concat([prefix, value]), key) });
}

const b64 = (value) => (value === null || value === undefined ? null : Buffer.from(value).toString('base64'));

// How far each dispatch partition's offset may be committed: past every record read, never past the first one
// held unstarted (records of one partition start in their order).
class Offsets {
  constructor() { this.readTo = new Map(); this.committed = new Map(); }
  read(partition, offset) { this.readTo.set(partition, Math.max(this.readTo.get(partition) || 0, offset + 1)); }
  due(held) {
    const first = new Map();
    for (const t of held) first.set(t.partition, Math.min(t.offset, first.has(t.partition) ? first.get(t.partition) : t.offset));
    const due = [];
    for (const [p, end] of this.readTo) {
      const at = first.has(p) ? first.get(p) : end;
      if (at !== this.committed.get(p)) { this.committed.set(p, at); due.push([p, at]); }
    }
    return due;
  }
  forget(keep) { for (const p of [...this.readTo.keys()]) if (!keep.has(p)) { this.readTo.delete(p); this.committed.delete(p); } }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { text, version } = latestCommandSchema(args.schemas);
  const encode = singleObjectEncoder(text);
  const kafka = new Kafka({ clientId: args.workerId, brokers: args.bootstrap.split(','), logLevel: logLevel.WARN });
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, idempotent: true,
    allowAutoTopicCreation: false });
  // read_committed (KafkaJS's default): a dispatch whose JobStarted aborted is never seen.
  const consumer = kafka.consumer({ groupId: `${args.namespace}.pool.${args.pool}`, maxWaitTimeInMs: 100,
    sessionTimeout: 6000, heartbeatInterval: 1500 });
  const topic = `${args.namespace}.dispatch.${args.pool}`;
  const sign = signer(args.keyFile, `${args.namespace}.commands`);
  await producer.connect();
  await producer.send({ topic: `${args.namespace}.schemas`, acks: -1, messages: [{ key: encode.fingerprint, value: text,
    headers: { subject: 'command', version: String(version) } }] });

  const running = new Map(); // "job_id/attempt" -> { dispatch, ctx, progress, message, done }
  const held = []; // { dispatch, partition, offset }: taken, waiting for a slot, in arrival order
  const offsets = new Offsets();
  const startedAt = Date.now() * 1000;
  let beatS = 1.0;
  const beat = async () => {
    const used = running.size;
    const row = {
      format: 1, instance: args.workerId, host: os.hostname(), pid: process.pid, started_at_us: startedAt,
      seen_at_us: Date.now() * 1000, interval_s: beatS, partitions: [], slots: [['ANY', used, Math.max(0, args.concurrency - used)]],
      running: [...new Set([...running.values()].map((r) => r.dispatch.job_id))], task_types: Object.keys(HANDLERS),
      pool: args.pool, jobs: [...running.values()].map((r) => [r.dispatch.job_id, r.dispatch.fencing_token,
        r.progress === undefined ? null : r.progress, r.message || '']),
    };
    await producer.send({ topic: `${args.namespace}.workers`, acks: -1,
      messages: [{ key: args.workerId, value: JSON.stringify(row) }] });
  };
  let beating = true;
  let wake = null; // an attempt taken: beat at once, the owner renews its lease from now
  const beater = (async () => {
    while (beating) {
      await beat().catch(() => {});
      await new Promise((resolve) => { wake = resolve; setTimeout(resolve, beatS * 1000); });
    }
  })();

  const report = async (d, outcome) => {
    const body = { attempt: d.attempt, fencing_token: d.fencing_token, outcome: outcome.kind, duration_us: outcome.durationUs,
      result: outcome.result === undefined ? null : { bytes: Buffer.from(JSON.stringify(outcome.result), 'utf8') },
      error_type: outcome.errorType || '', message: outcome.message || '', traceback: '', retryable: true,
      worker: args.workerId, pool: args.pool,
      records: outcome.records && outcome.records.length ? { bytes: Buffer.from(JSON.stringify(outcome.records), 'utf8') } : null };
    const value = encode({ command_id: crypto.randomUUID(), job_id: d.job_id, tenant_id: d.tenant, issued_at: Date.now() * 1000,
      correlation_id: null, body: { 'io.epochq.command.ReportAttempt': body } });
    await producer.send({ topic: `${args.namespace}.commands`, acks: -1, messages: [{ key: d.job_id, value, headers: sign(value) }] });
  };

  // An attempt ends once: by its handler, or by its cancel's grace running out (a later end is ignored).
  const finish = async (key, entry, outcome) => {
    if (entry.done) return;
    entry.done = true;
    outcome.durationUs = Number((process.hrtime.bigint() - entry.started) / 1000n);
    await report(entry.dispatch, outcome).catch((err) => console.error(`epochq-worker: reporting: ${err.message}`));
    running.delete(key);
    pump();
  };

  const run = async (key, entry) => {
    const d = entry.dispatch;
    const handler = HANDLERS[d.task_type];
    const records = [];
    const ctx = { jobId: d.job_id, attempt: d.attempt, fencingToken: d.fencing_token, tenant: d.tenant, cancelled: false,
      progress: (value, message = '') => { entry.progress = value; entry.message = message; },
      produce: (topic, value, { key = null, headers = {} } = {}) => records.push({ topic, key: b64(key), value: b64(value),
        headers: Object.entries(headers).map(([name, v]) => [name, b64(v)]) }) };
    entry.ctx = ctx;
    let outcome;
    try {
      if (!handler) throw Object.assign(new Error(`no handler for task type ${d.task_type}`), { name: 'UnknownTaskError' });
      const payload = JSON.parse(Buffer.from(d.payload.data, 'base64').toString('utf8'));
      outcome = { kind: 'succeeded', result: await handler(ctx, payload), records };
    } catch (err) {
      outcome = { kind: ctx.cancelled ? 'cancelled' : 'failed', errorType: err.name || 'Error', message: String(err.message || err) };
    }
    await finish(key, entry, outcome);
  };

  const lapsing = (d) => d.dispatched_at_us / 1e6 + d.lease_s - beatS < Date.now() / 1000; // no heartbeat renews it in time

  // Start held attempts while slots are free; one whose lease all but lapsed while held is skipped (the owner retries it).
  function pump() {
    while (held.length && running.size < args.concurrency) {
      const { dispatch: d } = held.shift();
      if (lapsing(d)) continue;
      const key = `${d.job_id}/${d.attempt}`;
      const entry = { dispatch: d, started: process.hrtime.bigint(), done: false };
      running.set(key, entry);
      console.log(JSON.stringify({ taken: d.job_id, attempt: d.attempt }));
      if (wake) wake();
      run(key, entry); // not awaited: the partitions are read on
    }
    commit();
  }

  function commit() {
    const due = offsets.due(held);
    if (due.length) {
      consumer.commitOffsets(due.map(([partition, offset]) => ({ topic, partition, offset: String(offset) })))
        .catch((err) => console.error(`epochq-worker: committing: ${err.message}`));
    }
  }

  // The owner's cancel: a running attempt's ctx.cancelled turns true and it has grace_s to end, else it is reported
  // cancelled; one held for a slot never starts and is reported cancelled at once.
  const cancel = (c) => {
    const key = `${c.job_id}/${c.attempt}`;
    const at = held.findIndex((t) => t.dispatch.job_id === c.job_id && t.dispatch.attempt === c.attempt
      && t.dispatch.fencing_token === c.fencing_token);
    if (at >= 0) {
      const [{ dispatch }] = held.splice(at, 1);
      report(dispatch, { kind: 'cancelled', message: 'cancelled before it started', durationUs: 0 }).catch(() => {});
      commit();
      return;
    }
    const entry = running.get(key);
    if (!entry || entry.dispatch.fencing_token !== c.fencing_token || !entry.ctx) return;
    entry.ctx.cancelled = true;
    setTimeout(() => finish(key, entry, { kind: 'cancelled', message: `did not stop within ${c.grace_s}s of its cancel` }),
      1000 * c.grace_s);
  };

  // Partitions gone to another worker: the dispatches held from them are its now (never committed past).
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    const keep = new Set((payload.memberAssignment || {})[topic] || []);
    for (let i = held.length - 1; i >= 0; i--) if (!keep.has(held[i].partition)) held.splice(i, 1);
    offsets.forget(keep);
  });
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommit: false, // offsets are committed by commit(): never past a held dispatch
    eachMessage: async ({ partition, message }) => {
      const offset = Number(message.offset);
      offsets.read(partition, offset);
      const d = JSON.parse(message.value.toString('utf8')); // fencing_token fits a double below 2^53
      if (d.kind === 'cancel') cancel(d);
      else {
        beatS = Math.max(0.5, Math.min(5, d.lease_s / 3));
        if (!lapsing(d)) held.push({ dispatch: d, partition, offset }); // else its lease all but lapsed: skipped
      }
      pump(); // never waits for a slot: the next record may be a cancel
    },
  });
  console.log(JSON.stringify({ worker: args.workerId, pool: args.pool, pid: process.pid }));

  const stop = async () => {
    beating = false;
    await consumer.disconnect().catch(() => {});
    await beater;
    await producer.send({ topic: `${args.namespace}.workers`, acks: -1, messages: [{ key: args.workerId, value: null }] })
      .catch(() => {});
    await producer.disconnect().catch(() => {});
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => { console.error(`epochq-worker: ${err.message}`); process.exit(1); });
