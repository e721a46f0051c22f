// CRC-64-AVRO (Rabin), as in the Avro specification: a schema's fingerprint in the single-object
// encoding's header (written little-endian) and in the keys of <ns>.schemas.
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

module.exports = { crc64Avro };
