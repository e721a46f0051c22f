// Command epochq-consume reads every event of an epochq namespace from Go, with the reader schema
// it was built with, whatever schema version wrote each record: the writer schema is looked up by
// its fingerprint in <ns>.schemas and resolved into the reader schema (hamba/avro), read with
// franz-go (read_committed). Records of event types the reader schema does not have are skipped
// and counted. The guide: docs/consuming.md.
//
//	epochq-consume [-schemas DIR] [-version N] BOOTSTRAP NAMESPACE
//
// -version N reads with schemas/vN/event.avsc (default: the newest). Prints one JSON line per
// event ({"partition","offset","job_id","type","epoch","writer"}), then a summary line
// {"summary":{"read":N,"skipped":{TYPE:COUNT}}}; the skipped types are also named in one line on
// stderr.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
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

// idle: a topic is read to its end once fetches bring nothing for this long (the last offsets of
// <ns>.events are transaction markers, which a consumer never sees).
const idle = 1500 * time.Millisecond

// Event is what this consumer reads of an EventEnvelope; the body stays generic (a map, by type name).
type Event struct {
	JobID *string        `avro:"job_id"`
	Epoch int64          `avro:"epoch"`
	Body  map[string]any `avro:"body"`
}

// readerSchema is schemas/vN/event.avsc as JSON, N given or the newest.
func readerSchema(root string, version int) (map[string]any, int, error) {
	files, _ := filepath.Glob(filepath.Join(root, "v*", "event.avsc"))
	number := func(p string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(p))[1:]); return n }
	sort.Slice(files, func(i, j int) bool { return number(files[i]) < number(files[j]) })
	for i := len(files) - 1; i >= 0; i-- {
		if version == 0 || number(files[i]) == version {
			schema, err := readJSON(files[i])
			return schema, number(files[i]), err
		}
	}
	return nil, 0, fmt.Errorf("no schemas/v%d/event.avsc under %s", version, root)
}

func readJSON(path string) (map[string]any, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(text, &out)
}

// withoutLogicalTypes drops "logicalType" attributes: timestamps stay plain int64 microseconds.
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
		out := make([]any, len(n))
		for i, v := range n {
			out[i] = withoutLogicalTypes(v)
		}
		return out
	}
	return node
}

// bodyTypes are the full names of the records of the envelope's body union.
func bodyTypes(schema map[string]any) []string {
	namespace, _ := schema["namespace"].(string)
	var names []string
	for _, f := range schema["fields"].([]any) {
		field := f.(map[string]any)
		if field["name"] != "body" {
			continue
		}
		for _, b := range field["type"].([]any) {
			if record, ok := b.(map[string]any); ok {
				name := record["name"].(string)
				if !strings.Contains(name, ".") {
					ns, ok := record["namespace"].(string)
					if !ok {
						ns = namespace
					}
					name = ns + "." + name
				}
				names = append(names, name)
			}
		}
	}
	return names
}

// decoder reads the records of one writer schema into the reader schema.
type decoder struct {
	resolved avro.Schema
	unknown  map[string]bool // writer body types the reader lacks: skipped, counted
}

// resolver builds decoders by writer fingerprint. A writer body type the reader lacks is added to
// the reader's union as an empty record of the same name: Avro resolution then skips its fields.
type resolver struct {
	reader   map[string]any
	known    map[string]bool
	writers  map[string]string // fingerprint hex -> schema JSON, from <ns>.schemas
	decoders map[string]*decoder
}

func newResolver(reader map[string]any) *resolver {
	r := &resolver{reader: withoutLogicalTypes(reader).(map[string]any), known: map[string]bool{},
		writers: map[string]string{}, decoders: map[string]*decoder{}}
	for _, name := range bodyTypes(r.reader) {
		r.known[name] = true
	}
	return r
}

func (r *resolver) decoder(fingerprint string) (*decoder, error) {
	if d, ok := r.decoders[fingerprint]; ok {
		return d, nil
	}
	text, ok := r.writers[fingerprint]
	if !ok {
		return nil, nil
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return nil, err
	}
	writerJSON := withoutLogicalTypes(raw).(map[string]any)
	widened := withoutLogicalTypes(r.reader).(map[string]any) // a copy
	d := &decoder{unknown: map[string]bool{}}
	for _, f := range widened["fields"].([]any) {
		field := f.(map[string]any)
		if field["name"] != "body" {
			continue
		}
		for _, name := range bodyTypes(writerJSON) {
			if !r.known[name] {
				d.unknown[name] = true
				field["type"] = append(field["type"].([]any), map[string]any{"type": "record", "name": name, "fields": []any{}})
			}
		}
	}
	writer, err := parse(writerJSON)
	if err != nil {
		return nil, fmt.Errorf("writer schema %s: %w", fingerprint, err)
	}
	reader, err := parse(widened)
	if err != nil {
		return nil, err
	}
	if d.resolved, err = avro.NewSchemaCompatibility().Resolve(reader, writer); err != nil {
		return nil, fmt.Errorf("cannot resolve writer schema %s into the reader schema: %w", fingerprint, err)
	}
	r.decoders[fingerprint] = d
	return d, nil
}

// parse parses a schema with a cache of its own: every version defines the same names.
func parse(schema map[string]any) (avro.Schema, error) {
	text, _ := json.Marshal(schema)
	return avro.ParseBytesWithCache(text, "", &avro.SchemaCache{})
}

// readAll hands every record of topic, from the start of each partition, to onRecord, and stops
// once the topic has nothing more (no group: partitions are read directly, nothing is committed).
func readAll(bootstrap, topic string, onRecord func(*kgo.Record) error) error {
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		return err
	}
	defer client.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), idle)
		fetches := client.PollFetches(ctx)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		for _, e := range fetches.Errors() {
			if !errors.Is(e.Err, context.DeadlineExceeded) {
				return fmt.Errorf("%s[%d]: %w", e.Topic, e.Partition, e.Err)
			}
		}
		if fetches.NumRecords() == 0 {
			return nil
		}
		for _, record := range fetches.Records() {
			if err := onRecord(record); err != nil {
				return err
			}
		}
	}
}

func loadSchemas(bootstrap, namespace string, r *resolver) error {
	return readAll(bootstrap, namespace+".schemas", func(record *kgo.Record) error {
		if record.Value == nil {
			delete(r.writers, string(record.Key))
		} else if genuine(string(record.Key), record.Value) {
			r.writers[string(record.Key)] = string(record.Value)
		} else { // the newest genuine entry of the key (if any) stays
			fmt.Fprintf(os.Stderr, "ignored the schema under key %s of %s.schemas: its text does not have that fingerprint\n",
				record.Key, namespace)
		}
		return nil
	})
}

// genuine says whether a schema text really has the fingerprint of its key in <ns>.schemas (CRC-64-AVRO of
// its canonical form, little-endian): anyone who may write the topic could put any text under any key.
func genuine(key string, text []byte) bool {
	var raw any
	if json.Unmarshal(text, &raw) != nil {
		return false
	}
	stripped, _ := json.Marshal(withoutLogicalTypes(raw)) // hamba/avro keeps them in its canonical form
	s, err := avro.ParseBytesWithCache(stripped, "", &avro.SchemaCache{})
	if err != nil {
		return false
	}
	fp, err := s.FingerprintUsing(avro.CRC64AvroLE)
	return err == nil && hex.EncodeToString(fp) == key
}

func run() error {
	exe, _ := os.Executable() // built by build.sh into examples/producers/go/
	schemas := flag.String("schemas", filepath.Join(filepath.Dir(exe), "..", "..", "..", "schemas"),
		"the repository's schemas/ directory")
	version := flag.Int("version", 0, "read with schemas/vN/event.avsc (default: the newest)")
	flag.Parse()
	if flag.NArg() != 2 {
		return fmt.Errorf("usage: epochq-consume [-schemas DIR] [-version N] BOOTSTRAP NAMESPACE")
	}
	bootstrap, namespace := flag.Arg(0), flag.Arg(1)
	reader, readerVersion, err := readerSchema(*schemas, *version)
	if err != nil {
		return err
	}
	r := newResolver(reader)
	if err := loadSchemas(bootstrap, namespace, r); err != nil {
		return err
	}
	read, skipped := 0, map[string]int{}
	err = readAll(bootstrap, namespace+".events", func(record *kgo.Record) error {
		value := record.Value
		if len(value) < 10 || value[0] != 0xc3 || value[1] != 0x01 {
			return fmt.Errorf("not a single-object record at %d@%d", record.Partition, record.Offset)
		}
		fingerprint := hex.EncodeToString(value[2:10])
		d, err := r.decoder(fingerprint)
		if err == nil && d == nil { // registered since we read <ns>.schemas
			if err = loadSchemas(bootstrap, namespace, r); err == nil {
				d, err = r.decoder(fingerprint)
			}
		}
		if err != nil {
			return err
		}
		if d == nil {
			return fmt.Errorf("unknown fingerprint %s at %d@%d: not in %s.schemas", fingerprint, record.Partition,
				record.Offset, namespace)
		}
		var event Event
		if err := avro.Unmarshal(d.resolved, value[10:], &event); err != nil {
			return fmt.Errorf("%d@%d: %w", record.Partition, record.Offset, err)
		}
		for name := range event.Body {
			short := name[strings.LastIndex(name, ".")+1:]
			if d.unknown[name] {
				skipped[short]++
				return nil
			}
			read++
			line, _ := json.Marshal(map[string]any{"partition": record.Partition, "offset": record.Offset,
				"job_id": event.JobID, "type": short, "epoch": event.Epoch, "writer": fingerprint})
			fmt.Println(string(line))
		}
		return nil
	})
	if err != nil {
		return err
	}
	summary, _ := json.Marshal(map[string]any{"summary": map[string]any{"read": read, "skipped": skipped}})
	fmt.Println(string(summary))
	if len(skipped) > 0 {
		fmt.Fprintln(os.Stderr, skippedLine(skipped, readerVersion))
	}
	return nil
}

// skippedLine names the skipped types, most first: "skipped 9 record(s) of 3 type(s) ...".
func skippedLine(skipped map[string]int, version int) string {
	kinds, total := make([]string, 0, len(skipped)), 0
	for kind, n := range skipped {
		kinds, total = append(kinds, kind), total+n
	}
	sort.Slice(kinds, func(i, j int) bool {
		a, b := kinds[i], kinds[j]
		return skipped[a] > skipped[b] || (skipped[a] == skipped[b] && a < b)
	})
	for i, kind := range kinds {
		kinds[i] = fmt.Sprintf("%s x%d", kind, skipped[kind])
	}
	return fmt.Sprintf("skipped %d record(s) of %d type(s) this reader's schema (v%d) does not have: %s",
		total, len(kinds), version, strings.Join(kinds, ", "))
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "epochq-consume:", err)
		os.Exit(1)
	}
}
