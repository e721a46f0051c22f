#!/usr/bin/env node
// A remote epochq worker in Node.js (docs/workers.md): it reads the attempts the engines dispatch to its
// pool, runs each with a handler of HANDLERS, heartbeats the fencing tokens of the attempts it runs (what
// renews their leases), and reports each result as a ReportAttempt command (Avro single-object encoding,
// the newest schemas/vN/command.avsc) keyed by the job id.
//
//   node worker.js BOOTSTRAP NAMESPACE POOL [--worker-id ID] [--concurrency N] [--schemas DIR]
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

// The handlers, by task type: each takes (ctx, payload) and returns a JSON-able result, or throws.
const HANDLERS = {
  'remote.echo': async (ctx, payload) => ({ echo: payload, lang: 'node', pid: process.pid, token: ctx.fencingToken }),
  'remote.slow': async (ctx, payload) => {
    await sleep(1000 * Number(payload.seconds || 0));
    return { attempt: ctx.attempt, lang: 'node', pid: process.pid };
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
    schemas: path.resolve(__dirname, '../../../schemas') };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--worker-id') opts.workerId = argv[++i];
    else if (argv[i] === '--concurrency') opts.concurrency = Number(argv[++i]);
    else if (argv[i] === '--schemas') opts.schemas = argv[++i];
    else positional.push(argv[i]);
  }
  if (positional.length !== 3) throw new Error('usage: worker.js BOOTSTRAP NAMESPACE POOL [--worker-id ID] [--concurrency N]');
  const [bootstrap, namespace, pool] = positional;
  return { bootstrap, namespace, pool, ...opts };
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
  await producer.connect();
  await producer.send({ topic: `${args.namespace}.schemas`, acks: -1, messages: [{ key: encode.fingerprint, value: text,
    headers: { subject: 'command', version: String(version) } }] });

  const running = new Map(); // "job_id/attempt" -> { dispatch, progress }
  const startedAt = Date.now() * 1000;
  let beatS = 1.0;
  const beat = async () => {
    const used = running.size;
    const row = {
      format: 1, instance: args.workerId, host: os.hostname(), pid: process.pid, started_at_us: startedAt,
      seen_at_us: Date.now() * 1000, interval_s: beatS, partitions: [], slots: [['ANY', used, Math.max(0, args.concurrency - used)]],
      running: [...new Set([...running.values()].map((r) => r.dispatch.job_id))], task_types: Object.keys(HANDLERS),
      pool: args.pool, jobs: [...running.values()].map((r) => [r.dispatch.job_id, r.dispatch.fencing_token, null, '']),
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
      worker: args.workerId, pool: args.pool, records: null };
    const value = encode({ command_id: crypto.randomUUID(), job_id: d.job_id, tenant_id: d.tenant, issued_at: Date.now() * 1000,
      correlation_id: null, body: { 'io.epochq.command.ReportAttempt': body } });
    await producer.send({ topic: `${args.namespace}.commands`, acks: -1, messages: [{ key: d.job_id, value }] });
  };

  const run = async (d) => {
    const handler = HANDLERS[d.task_type];
    const started = process.hrtime.bigint();
    const ctx = { jobId: d.job_id, attempt: d.attempt, fencingToken: d.fencing_token, tenant: d.tenant };
    let outcome;
    try {
      if (!handler) throw Object.assign(new Error(`no handler for task type ${d.task_type}`), { name: 'UnknownTaskError' });
      const payload = JSON.parse(Buffer.from(d.payload.data, 'base64').toString('utf8'));
      outcome = { kind: 'succeeded', result: await handler(ctx, payload) };
    } catch (err) {
      outcome = { kind: 'failed', errorType: err.name || 'Error', message: String(err.message || err) };
    }
    outcome.durationUs = Number((process.hrtime.bigint() - started) / 1000n);
    await report(d, outcome);
  };

  await consumer.subscribe({ topic: `${args.namespace}.dispatch.${args.pool}`, fromBeginning: true });
  await consumer.run({
    partitionsConsumedConcurrently: args.concurrency,
    eachMessage: async ({ message }) => {
      const d = JSON.parse(message.value.toString('utf8')); // fencing_token fits a double below 2^53
      if (d.kind === 'cancel') return; // a cancel of a running attempt: this example's handlers do not stop early
      beatS = Math.max(0.5, Math.min(5, d.lease_s / 3));
      if (d.dispatched_at_us / 1e6 + d.lease_s - beatS < Date.now() / 1000) return; // its lease all but lapsed
      while (running.size >= args.concurrency) await sleep(20);
      const key = `${d.job_id}/${d.attempt}`;
      running.set(key, { dispatch: d });
      console.log(JSON.stringify({ taken: d.job_id, attempt: d.attempt }));
      if (wake) wake();
      run(d).finally(() => running.delete(key)); // not awaited: a slow attempt holds no partition
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
