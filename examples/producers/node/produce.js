#!/usr/bin/env node
// Submit one epochq job from Node.js: a SubmitJob CommandEnvelope in Avro single-object
// encoding (avsc), produced with KafkaJS (Java-compatible murmur2 partitioning, acks=all), after
// registering its writer schema in <ns>.schemas (key: the fingerprint, 16 hex digits; value: the schema).
// The guide: docs/producing.md.
//
//   node produce.js BOOTSTRAP NAMESPACE TASK_TYPE TENANT PAYLOAD_JSON [--label k=v ...] [--schemas DIR]
//                   [--signing-key PEM_FILE]   (the tenant's Ed25519 key: docs/contract.md, "Signing a command")
//
// Prints the job id and partition as one JSON line: {"job_id": "...", "partition": 2}.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const avro = require('avsc');
const { crc64Avro } = require('./fingerprint');
const { Kafka, Partitioners, logLevel } = require('kafkajs');

// The newest schemas/vN/command.avsc: what the engine reads (it also reads every older version).
function latestCommandSchema(root) {
  const versions = fs.readdirSync(root).filter((d) => /^v\d+$/.test(d))
    .filter((d) => fs.existsSync(path.join(root, d, 'command.avsc')))
    .sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
  const text = fs.readFileSync(path.join(root, versions.at(-1), 'command.avsc'), 'utf8');
  return { text, version: Number(versions.at(-1).slice(1)), schema: JSON.parse(text) };
}

function singleObjectEncoder(schema) {
  const type = avro.Type.forSchema(schema, { wrapUnions: true });
  const header = Buffer.alloc(10);
  header.writeUInt16BE(0xc301, 0);
  // avsc's schema() without options is the Parsing Canonical Form.
  header.writeBigUInt64LE(crc64Avro(JSON.stringify(type.schema())), 2);
  const encode = (value) => Buffer.concat([header, type.toBuffer(value)]);
  encode.fingerprint = header.subarray(2).toString('hex'); // the key of <ns>.schemas
  return encode;
}

// The epochq-signature header: Ed25519 over "epochq-command-v1" 0x00 topic 0x00 value (docs/contract.md).
function signatureHeaders(keyFile, topic, value) {
  if (!keyFile) return {};
  const key = crypto.createPrivateKey(fs.readFileSync(keyFile));
  const message = Buffer.concat([Buffer.from('epochq-command-v1\0' + topic + '\0', 'utf8'), value]);
  return { 'epochq-signature': crypto.sign(null, message, key) };
}

function parseArgs(argv) {
  const positional = [], labels = {};
  let schemas = path.resolve(__dirname, '../../../schemas');
  let signingKey = process.env.EPOCHQ_SIGNING_KEY_FILE || null;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--label') { const [k, ...v] = argv[++i].split('='); labels[k] = v.join('='); }
    else if (argv[i] === '--schemas') schemas = argv[++i];
    else if (argv[i] === '--signing-key') signingKey = argv[++i];
    else positional.push(argv[i]);
  }
  if (positional.length !== 5) {
    throw new Error('usage: produce.js BOOTSTRAP NAMESPACE TASK_TYPE TENANT PAYLOAD_JSON [--label k=v] [--schemas DIR]');
  }
  const [bootstrap, namespace, taskType, tenant, payload] = positional;
  JSON.parse(payload); // must be JSON; the bytes are sent as given (no float rounding of big integers)
  return { bootstrap, namespace, taskType, tenant, payload, labels, schemas, signingKey };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { text, version, schema } = latestCommandSchema(args.schemas);
  const encode = singleObjectEncoder(schema);
  const jobId = crypto.randomUUID();
  const submit = {
    task_type: args.taskType,
    payload: { data: Buffer.from(args.payload, 'utf8'), content_type: 'application/json', schema_name: '', schema_version: 1 },
    priority: 5, run_at: null, idempotency_key: null, lane: null, max_attempts: null,
  };
  const submitSchema = schema.fields.find((f) => f.name === 'body').type.find((t) => t.name === 'SubmitJob');
  if (submitSchema.fields.some((f) => f.name === 'labels')) submit.labels = args.labels; // v2 and later
  const value = encode({
    command_id: crypto.randomUUID(),
    job_id: jobId,
    tenant_id: args.tenant,
    issued_at: Date.now() * 1000, // timestamp-micros
    correlation_id: null,
    body: { 'io.epochq.command.SubmitJob': submit },
  });

  const kafka = new Kafka({ clientId: 'epochq-node-producer', brokers: args.bootstrap.split(','), logLevel: logLevel.WARN });
  // KafkaJS v2's DefaultPartitioner is the Java client's murmur2 partitioner.
  // allowAutoTopicCreation false: a namespace without <ns>.schemas is an error, never a topic made by accident.
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, idempotent: true,
    allowAutoTopicCreation: false });
  await producer.connect();
  try {
    // Register the writer schema before writing with it: readers of any age find it by fingerprint.
    await producer.send({ topic: `${args.namespace}.schemas`, acks: -1, messages: [{ key: encode.fingerprint, value: text,
      headers: { subject: 'command', version: String(version) } }] });
    const topic = `${args.namespace}.commands`;
    const headers = signatureHeaders(args.signingKey, topic, value);
    const [meta] = await producer.send({ topic, acks: -1, messages: [{ key: jobId, value, headers }] });
    console.log(JSON.stringify({ job_id: jobId, partition: meta.partition }));
  } finally {
    await producer.disconnect();
  }
}

main().catch((err) => { console.error(`epochq-produce: ${err.message}`); process.exit(1); });
