#!/usr/bin/env node
// Read every event of an epochq namespace from Node.js, with the reader schema this consumer was
// built with, whatever schema version wrote each record: the writer schema is looked up by its
// fingerprint in <ns>.schemas and resolved into the reader schema (avsc). Records of event types
// the reader schema does not have are skipped and counted. The guide: docs/consuming.md.
//
//   node consume.js BOOTSTRAP NAMESPACE [--schemas DIR] [--version N]
//
// --version N reads with schemas/vN/event.avsc (default: the newest). Prints one JSON line per
// event ({"partition", "offset", "job_id", "type", "epoch", "writer"}), then a summary line
// {"summary": {"read": N, "skipped": {TYPE: COUNT}}}; the skipped types are also named in one
// line on stderr.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const avro = require('avsc');
const { crc64Avro } = require('./fingerprint');
const { CompressionCodecs, CompressionTypes, Kafka, logLevel } = require('kafkajs');
const lz4 = require('lz4js');

// Engines write events LZ4-compressed; KafkaJS ships no LZ4 codec: lz4js (pure JS) reads the frames.
CompressionCodecs[CompressionTypes.LZ4] = () => ({
  compress: async (encoder) => Buffer.from(lz4.compress(encoder.buffer)),
  decompress: async (buffer) => Buffer.from(lz4.decompress(buffer)),
});

function parseArgs(argv) {
  const positional = [];
  let schemas = path.resolve(__dirname, '../../../schemas');
  let version = null;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--schemas') schemas = argv[++i];
    else if (argv[i] === '--version') version = Number(argv[++i]);
    else positional.push(argv[i]);
  }
  if (positional.length !== 2) throw new Error('usage: consume.js BOOTSTRAP NAMESPACE [--schemas DIR] [--version N]');
  return { bootstrap: positional[0], namespace: positional[1], schemas, version };
}

// The reader schema: schemas/vN/event.avsc, N given or the newest.
function readerSchema(root, version) {
  const versions = fs.readdirSync(root).filter((d) => /^v\d+$/.test(d))
    .filter((d) => fs.existsSync(path.join(root, d, 'event.avsc')))
    .map((d) => Number(d.slice(1))).sort((a, b) => a - b);
  const chosen = version ?? versions.at(-1);
  if (!versions.includes(chosen)) throw new Error(`no schemas/v${chosen}/event.avsc in ${root}`);
  return { version: chosen, schema: JSON.parse(fs.readFileSync(path.join(root, `v${chosen}`, 'event.avsc'), 'utf8')) };
}

const fullName = (record, namespace) => (record.name.includes('.') ? record.name : `${record.namespace || namespace}.${record.name}`);

// Decoders by writer fingerprint. A writer body type the reader lacks is added to the reader's
// union as an empty record of the same name: Avro resolution then skips its fields, and the
// record is counted instead of failing the whole resolver.
class Resolver {
  constructor(reader) {
    this.reader = reader;
    this.known = new Set(bodyBranches(reader).map((b) => fullName(b, reader.namespace)));
    this.writers = new Map(); // fingerprint hex -> schema JSON text, from <ns>.schemas
    this.decoders = new Map();
  }

  decoder(fingerprint) {
    if (!this.decoders.has(fingerprint)) {
      const text = this.writers.get(fingerprint);
      if (text === undefined) return null;
      const writer = JSON.parse(text);
      const unknown = bodyBranches(writer).map((b) => fullName(b, writer.namespace)).filter((n) => !this.known.has(n));
      const widened = JSON.parse(JSON.stringify(this.reader));
      bodyField(widened).type.push(...unknown.map((name) => ({ type: 'record', name, fields: [] })));
      const readerType = avro.Type.forSchema(widened, { wrapUnions: true });
      const resolver = readerType.createResolver(avro.Type.forSchema(writer, { wrapUnions: true }));
      this.decoders.set(fingerprint, { readerType, resolver, unknown: new Set(unknown) });
    }
    return this.decoders.get(fingerprint);
  }
}

const bodyField = (schema) => schema.fields.find((f) => f.name === 'body');
const bodyBranches = (schema) => bodyField(schema).type.filter((t) => typeof t === 'object');

// Every record of a topic up to its end when we start: KafkaJS has no assign(), so a consumer
// group of our own (under <ns>.reader., which `epochq acl apply` lets auditors use), never committing.
// A partition is done at its end offset, or once fetches bring nothing more for IDLE_MS: the last
// offsets of <ns>.events are transaction markers, which a consumer never sees.
const IDLE_MS = 1000;

async function readAll(kafka, topic, onRecord) {
  const admin = kafka.admin();
  await admin.connect();
  let ends;
  try {
    ends = await admin.fetchTopicOffsets(topic);
  } finally {
    await admin.disconnect();
  }
  const left = new Map(ends.filter((p) => BigInt(p.high) > BigInt(p.low)).map((p) => [p.partition, BigInt(p.high)]));
  if (left.size === 0) return;
  const namespace = topic.slice(0, topic.lastIndexOf('.'));
  const consumer = kafka.consumer({ groupId: `${namespace}.reader.node-${crypto.randomUUID()}`, maxWaitTimeInMs: 100 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise((resolve, reject) => {
      let lastRecordAt = Date.now(), joined = false;
      consumer.on(consumer.events.GROUP_JOIN, () => { joined = true; lastRecordAt = Date.now(); });
      consumer.on(consumer.events.FETCH, () => { if (joined && Date.now() - lastRecordAt > IDLE_MS) resolve(); });
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          lastRecordAt = Date.now();
          if (!left.has(partition)) return;
          try {
            await onRecord(partition, message);
          } catch (err) {
            reject(err);
            return;
          }
          if (BigInt(message.offset) + 1n >= left.get(partition)) left.delete(partition);
          if (left.size === 0) resolve();
        },
      }).catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
}

async function loadSchemas(kafka, namespace, resolver) {
  await readAll(kafka, `${namespace}.schemas`, async (_partition, message) => {
    const key = message.key.toString('utf8');
    if (message.value === null) resolver.writers.delete(key);
    else if (genuine(key, message.value.toString('utf8'))) resolver.writers.set(key, message.value.toString('utf8'));
    else console.error(`ignored the schema under key ${key} of ${namespace}.schemas: its text does not have that fingerprint`);
  });
}

// Whether a schema text really has the fingerprint of its key in <ns>.schemas (little-endian hex of the
// CRC-64-AVRO of its Parsing Canonical Form: avsc's schema() without options): anyone who may write the
// topic could put any text under any key. The newest genuine entry of a key is the one kept.
function genuine(key, text) {
  try {
    const le = Buffer.alloc(8);
    le.writeBigUInt64LE(crc64Avro(JSON.stringify(avro.Type.forSchema(JSON.parse(text), { wrapUnions: true }).schema())));
    return le.toString('hex') === key;
  } catch (_err) {
    return false;
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { version, schema } = readerSchema(args.schemas, args.version);
  const kafka = new Kafka({ clientId: 'epochq-node-consumer', brokers: args.bootstrap.split(','), logLevel: logLevel.WARN });
  const resolver = new Resolver(schema);
  await loadSchemas(kafka, args.namespace, resolver);
  let read = 0;
  const skipped = {};
  await readAll(kafka, `${args.namespace}.events`, async (partition, message) => {
    const value = message.value;
    if (value === null || value.length < 10 || value.readUInt16BE(0) !== 0xc301) throw new Error(`not a single-object record at ${partition}@${message.offset}`);
    const fingerprint = value.subarray(2, 10).toString('hex');
    if (resolver.decoder(fingerprint) === null) await loadSchemas(kafka, args.namespace, resolver); // registered since
    const decoder = resolver.decoder(fingerprint);
    if (decoder === null) throw new Error(`unknown fingerprint ${fingerprint} at ${partition}@${message.offset}: not in ${args.namespace}.schemas`);
    const event = decoder.readerType.fromBuffer(value.subarray(10), decoder.resolver);
    const jobId = event.job_id === null ? null : (event.job_id.string ?? event.job_id);
    const [name] = Object.keys(event.body);
    const type = name.slice(name.lastIndexOf('.') + 1);
    if (decoder.unknown.has(name)) {
      skipped[type] = (skipped[type] || 0) + 1;
      return;
    }
    read += 1;
    console.log(JSON.stringify({ partition, offset: Number(message.offset), job_id: jobId, type, epoch: Number(event.epoch), writer: fingerprint }));
  });
  console.log(JSON.stringify({ summary: { read, skipped } }));
  const total = Object.values(skipped).reduce((a, b) => a + b, 0);
  if (total) {
    const kinds = Object.entries(skipped).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).map(([t, n]) => `${t} x${n}`);
    console.error(`skipped ${total} record(s) of ${kinds.length} type(s) this reader's schema (v${version}) does not have: ${kinds.join(', ')}`);
  }
}

main().catch((err) => { console.error(`epochq-consume: ${err.message}`); process.exit(1); });
