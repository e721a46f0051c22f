// Command epochq-produce submits one epochq job from Go: a SubmitJob CommandEnvelope in Avro
// single-object encoding (hamba/avro), produced with franz-go (Java-compatible murmur2,
// acks=all), after registering its writer schema in <ns>.schemas. The guide: docs/producing.md.
//
//	epochq-produce [-schemas DIR] [-label k=v ...] [-signing-key PEM_FILE] BOOTSTRAP NAMESPACE TASK_TYPE TENANT PAYLOAD_JSON
//
// -signing-key (or EPOCHQ_SIGNING_KEY_FILE): the tenant's Ed25519 private key (PKCS#8 PEM); the
// record then carries the epochq-signature header (docs/contract.md, "Signing a command").
//
// Prints the job id and partition as one JSON line: {"job_id":"...","partition":2}.
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The records of schemas/vN/command.avsc. Fields a version lacks (labels before v2) are not written.
type Payload struct {
	Data          []byte `avro:"data"`
	ContentType   string `avro:"content_type"`
	SchemaName    string `avro:"schema_name"`
	SchemaVersion int32  `avro:"schema_version"`
}

type SubmitJob struct {
	TaskType       string            `avro:"task_type"`
	Payload        Payload           `avro:"payload"`
	Priority       int32             `avro:"priority"`
	RunAt          *int64            `avro:"run_at"` // µs since the epoch; nil: now
	IdempotencyKey *string           `avro:"idempotency_key"`
	Lane           *string           `avro:"lane"`
	MaxAttempts    *int32            `avro:"max_attempts"`
	Labels         map[string]string `avro:"labels"` // since v2
}

type CommandEnvelope struct {
	CommandID     string  `avro:"command_id"`
	JobID         string  `avro:"job_id"`
	TenantID      string  `avro:"tenant_id"`
	IssuedAt      int64   `avro:"issued_at"` // timestamp-micros
	CorrelationID *string `avro:"correlation_id"`
	Body          any     `avro:"body"` // a union of records: SubmitJob | CancelJob | ReplayDeadJob
}

// latestCommandSchema is the newest schemas/vN/command.avsc (the engine reads every older one too)
// and its version N.
func latestCommandSchema(root string) ([]byte, int, error) {
	files, _ := filepath.Glob(filepath.Join(root, "v*", "command.avsc"))
	version := func(p string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(p))[1:]); return n }
	sort.Slice(files, func(i, j int) bool { return version(files[i]) < version(files[j]) })
	if len(files) == 0 {
		return nil, 0, fmt.Errorf("no v*/command.avsc under %s", root)
	}
	text, err := os.ReadFile(files[len(files)-1])
	return text, version(files[len(files)-1]), err
}

// withoutLogicalTypes drops "logicalType" attributes. The Parsing Canonical Form has none, but
// hamba/avro keeps them in its canonical form, so the fingerprint would not be the contract's.
func withoutLogicalTypes(node any) any {
	switch n := node.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, v := range n {
			if k != "logicalType" {
				out[k] = withoutLogicalTypes(v)
			}
		}
		return out
	case []any:
		for i, v := range n {
			n[i] = withoutLogicalTypes(v)
		}
	}
	return node
}

// singleObject encodes v as C3 01 + CRC-64-AVRO fingerprint (little-endian) + Avro binary body.
func singleObject(schema avro.Schema, v any) ([]byte, error) {
	fingerprint, err := schema.FingerprintUsing(avro.CRC64AvroLE)
	if err != nil {
		return nil, err
	}
	body, err := avro.Marshal(schema, v)
	return append(append([]byte{0xc3, 0x01}, fingerprint...), body...), err
}

func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

type labels map[string]string

func (l labels) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labels) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("expected key=value, got %q", kv)
	}
	l[k] = v
	return nil
}

func run() error {
	exe, _ := os.Executable() // built by build.sh into examples/producers/go/
	schemas := flag.String("schemas", filepath.Join(filepath.Dir(exe), "..", "..", "..", "schemas"),
		"the repository's schemas/ directory")
	jobLabels := labels{}
	flag.Var(jobLabels, "label", "a job label key=value (schema v2 and later); repeatable")
	signingKey := flag.String("signing-key", os.Getenv("EPOCHQ_SIGNING_KEY_FILE"),
		"the tenant's Ed25519 private key (PKCS#8 PEM): sign the command")
	flag.Parse()
	if flag.NArg() != 5 {
		return fmt.Errorf("usage: epochq-produce [-schemas DIR] [-label k=v] BOOTSTRAP NAMESPACE TASK_TYPE TENANT PAYLOAD_JSON")
	}
	bootstrap, namespace, taskType, tenant, payload := flag.Arg(0), flag.Arg(1), flag.Arg(2), flag.Arg(3), flag.Arg(4)
	if !json.Valid([]byte(payload)) {
		return fmt.Errorf("payload is not valid JSON")
	}
	text, schemaVersion, err := latestCommandSchema(*schemas)
	if err != nil {
		return err
	}
	var raw any
	if err := json.Unmarshal(text, &raw); err != nil {
		return err
	}
	stripped, _ := json.Marshal(withoutLogicalTypes(raw))
	schema, err := avro.Parse(string(stripped))
	if err != nil {
		return err
	}
	avro.Register("io.epochq.command.SubmitJob", SubmitJob{}) // the union branch, by full name

	jobID := uuid4()
	value, err := singleObject(schema, CommandEnvelope{
		CommandID: uuid4(), JobID: jobID, TenantID: tenant, IssuedAt: time.Now().UnixMicro(),
		Body: SubmitJob{
			TaskType: taskType, Priority: 5, Labels: jobLabels,
			// The payload bytes go as given: big integers keep every digit.
			Payload: Payload{Data: []byte(payload), ContentType: "application/json", SchemaVersion: 1},
		},
	})
	if err != nil {
		return err
	}

	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), // nil hasher: Kafka's murmur2, as Java
		kgo.RequiredAcks(kgo.AllISRAcks()),                   // acks=all (idempotent by default)
	)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Register the writer schema before writing with it: readers of any age find it by fingerprint
	// (franz-go never creates a missing topic unless asked to).
	registration := &kgo.Record{Topic: namespace + ".schemas", Key: []byte(hex.EncodeToString(value[2:10])), Value: text,
		Headers: []kgo.RecordHeader{{Key: "subject", Value: []byte("command")},
			{Key: "version", Value: []byte(strconv.Itoa(schemaVersion))}}}
	if err := client.ProduceSync(ctx, registration).FirstErr(); err != nil {
		return fmt.Errorf("%s: %w", registration.Topic, err)
	}
	record := &kgo.Record{Topic: namespace + ".commands", Key: []byte(jobID), Value: value}
	if *signingKey != "" {
		signature, err := sign(*signingKey, record.Topic, value)
		if err != nil {
			return err
		}
		record.Headers = []kgo.RecordHeader{{Key: "epochq-signature", Value: signature}}
	}
	if err := client.ProduceSync(ctx, record).FirstErr(); err != nil {
		return err
	}
	out, _ := json.Marshal(map[string]any{"job_id": jobID, "partition": record.Partition})
	fmt.Println(string(out))
	return nil
}

// sign is the epochq-signature of a command record: Ed25519 over
// "epochq-command-v1" 0x00 topic 0x00 value, by the key in keyFile.
func sign(keyFile, topic string, value []byte) ([]byte, error) {
	text, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(text)
	if block == nil {
		return nil, fmt.Errorf("%s: not a PEM file", keyFile)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	key, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", keyFile)
	}
	message := append([]byte("epochq-command-v1\x00"+topic+"\x00"), value...)
	return ed25519.Sign(key, message), nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "epochq-produce:", err)
		os.Exit(1)
	}
}
