// Command epochq-worker is a remote epochq worker in Go (docs/workers.md): it reads the attempts the engines
// dispatch to its pool, runs each with a handler of handlers, heartbeats the fencing tokens of the attempts it
// runs (what renews their leases), and reports each result as a ReportAttempt command (Avro single-object
// encoding, the newest schemas/vN/command.avsc, hamba/avro) keyed by the job id, with franz-go.
//
//	epochq-worker [-schemas DIR] [-worker-id ID] [-concurrency N] BOOTSTRAP NAMESPACE POOL
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Dispatch is one record of <ns>.dispatch.<pool> (JSON).
type Dispatch struct {
	Kind           string  `json:"kind"` // "cancel": a cancel of a running attempt, not a dispatch
	JobID          string  `json:"job_id"`
	Tenant         string  `json:"tenant"`
	TaskType       string  `json:"task_type"`
	Attempt        int32   `json:"attempt"`
	FencingToken   int64   `json:"fencing_token"`
	Pool           string  `json:"pool"`
	LeaseS         float64 `json:"lease_s"`
	DispatchedAtUs int64   `json:"dispatched_at_us"`
	Payload        struct {
		Data string `json:"data"` // base64
	} `json:"payload"`
}

// ReportAttempt is the command body a result travels in (schemas/v6/command.avsc).
type ReportAttempt struct {
	Attempt      int32   `avro:"attempt"`
	FencingToken int64   `avro:"fencing_token"`
	Outcome      string  `avro:"outcome"`
	DurationUs   int64   `avro:"duration_us"`
	Result       *[]byte `avro:"result"`
	ErrorType    string  `avro:"error_type"`
	Message      string  `avro:"message"`
	Traceback    string  `avro:"traceback"`
	Retryable    bool    `avro:"retryable"`
	Worker       string  `avro:"worker"`
	Pool         string  `avro:"pool"`
	Records      *[]byte `avro:"records"`
}

type CommandEnvelope struct {
	CommandID     string  `avro:"command_id"`
	JobID         string  `avro:"job_id"`
	TenantID      string  `avro:"tenant_id"`
	IssuedAt      int64   `avro:"issued_at"`
	CorrelationID *string `avro:"correlation_id"`
	Body          any     `avro:"body"`
}

// Ctx is what a handler knows of its attempt.
type Ctx struct {
	JobID        string
	Attempt      int32
	FencingToken int64
}

// handlers, by task type: each returns a JSON-able result, or an error.
var handlers = map[string]func(Ctx, map[string]any) (any, error){
	"remote.echo": func(c Ctx, p map[string]any) (any, error) {
		return map[string]any{"echo": p, "lang": "go", "pid": os.Getpid(), "token": c.FencingToken}, nil
	},
	"remote.slow": func(c Ctx, p map[string]any) (any, error) {
		seconds, _ := p["seconds"].(float64)
		time.Sleep(time.Duration(seconds * float64(time.Second)))
		return map[string]any{"attempt": c.Attempt, "lang": "go", "pid": os.Getpid()}, nil
	},
}

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

func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

type worker struct {
	id, namespace, pool string
	concurrency         int
	client              *kgo.Client
	schema              avro.Schema
	mu                  sync.Mutex
	running             map[string]Dispatch // "job/attempt" -> the attempt
	beat                time.Duration
	started             int64
}

func (w *worker) heartbeat(ctx context.Context, tombstone bool) {
	w.mu.Lock()
	jobs, running := [][]any{}, []string{}
	for _, d := range w.running {
		jobs = append(jobs, []any{d.JobID, d.FencingToken, nil, ""})
		running = append(running, d.JobID)
	}
	used := len(w.running)
	interval := w.beat.Seconds()
	w.mu.Unlock()
	start := time.Now()
	defer func() {
		if took := time.Since(start); took.Seconds() > interval/2 {
			fmt.Fprintf(os.Stderr, "epochq-worker: a heartbeat took %v\n", took)
		}
	}()
	var value []byte
	if !tombstone {
		value, _ = json.Marshal(map[string]any{"format": 1, "instance": w.id, "host": "go", "pid": os.Getpid(),
			"started_at_us": w.started, "seen_at_us": time.Now().UnixMicro(), "interval_s": interval,
			"partitions": []any{}, "slots": [][]any{{"ANY", used, max(0, w.concurrency-used)}}, "running": running,
			"task_types": []string{"remote.echo", "remote.slow"}, "pool": w.pool, "jobs": jobs})
	}
	w.client.ProduceSync(ctx, &kgo.Record{Topic: w.namespace + ".workers", Key: []byte(w.id), Value: value})
}

func (w *worker) run(ctx context.Context, d Dispatch) {
	start := time.Now()
	body := ReportAttempt{Attempt: d.Attempt, FencingToken: d.FencingToken, Outcome: "succeeded", Retryable: true,
		Worker: w.id, Pool: w.pool}
	var payload map[string]any
	raw, err := base64.StdEncoding.DecodeString(d.Payload.Data)
	if err == nil {
		err = json.Unmarshal(raw, &payload)
	}
	var result any
	if handler, ok := handlers[d.TaskType]; !ok {
		err = fmt.Errorf("no handler for task type %s", d.TaskType)
	} else if err == nil {
		result, err = handler(Ctx{d.JobID, d.Attempt, d.FencingToken}, payload)
	}
	if err != nil {
		body.Outcome, body.ErrorType, body.Message = "failed", "Error", err.Error()
	} else {
		encoded, _ := json.Marshal(result)
		body.Result = &encoded
	}
	body.DurationUs = time.Since(start).Microseconds()
	envelope := CommandEnvelope{CommandID: uuid4(), JobID: d.JobID, TenantID: d.Tenant, IssuedAt: time.Now().UnixMicro(),
		Body: body}
	value, err := avro.Marshal(w.schema, envelope)
	if err != nil {
		fmt.Fprintln(os.Stderr, "epochq-worker: encoding the result:", err)
		return
	}
	fingerprint, _ := w.schema.FingerprintUsing(avro.CRC64AvroLE)
	value = append(append([]byte{0xc3, 0x01}, fingerprint...), value...)
	if err := w.client.ProduceSync(ctx, &kgo.Record{Topic: w.namespace + ".commands", Key: []byte(d.JobID),
		Value: value}).FirstErr(); err != nil {
		fmt.Fprintln(os.Stderr, "epochq-worker: reporting the result:", err)
	}
}

func run() error {
	exe, _ := os.Executable()
	schemas := flag.String("schemas", filepath.Join(filepath.Dir(exe), "..", "..", "..", "schemas"), "the schemas/ directory")
	id := flag.String("worker-id", fmt.Sprintf("go-worker-%d", os.Getpid()), "this worker's name in `epochq workers`")
	concurrency := flag.Int("concurrency", 4, "attempts run at once")
	flag.Parse()
	if flag.NArg() != 3 {
		return fmt.Errorf("usage: epochq-worker [-schemas DIR] [-worker-id ID] [-concurrency N] BOOTSTRAP NAMESPACE POOL")
	}
	bootstrap, namespace, pool := flag.Arg(0), flag.Arg(1), flag.Arg(2)
	text, version, err := latestCommandSchema(*schemas)
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
	avro.Register("io.epochq.command.ReportAttempt", ReportAttempt{})
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ConsumerGroup(namespace+".pool."+pool), kgo.ConsumeTopics(namespace+".dispatch."+pool),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), // a dispatch whose JobStarted aborted is never seen
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(6*time.Second),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), // Kafka's murmur2, as Java
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	fingerprint, _ := schema.FingerprintUsing(avro.CRC64AvroLE)
	if err := client.ProduceSync(ctx, &kgo.Record{Topic: namespace + ".schemas", Key: []byte(hex.EncodeToString(fingerprint)),
		Value: text, Headers: []kgo.RecordHeader{{Key: "subject", Value: []byte("command")},
			{Key: "version", Value: []byte(strconv.Itoa(version))}}}).FirstErr(); err != nil {
		return err
	}
	w := &worker{id: *id, namespace: namespace, pool: pool, concurrency: *concurrency, client: client, schema: schema,
		running: map[string]Dispatch{}, beat: time.Second, started: time.Now().UnixMicro()}
	wake := make(chan struct{}, 1) // an attempt taken: beat at once, the owner renews its lease from now
	go func() {
		for ctx.Err() == nil {
			w.heartbeat(ctx, false)
			w.mu.Lock()
			beat := w.beat
			w.mu.Unlock()
			select {
			case <-time.After(beat):
			case <-wake:
			case <-ctx.Done():
			}
		}
	}()
	fmt.Printf("{\"worker\":%q,\"pool\":%q,\"pid\":%d}\n", w.id, pool, os.Getpid())
	slots := make(chan struct{}, *concurrency)
	for ctx.Err() == nil {
		fetches := client.PollFetches(ctx)
		fetches.EachRecord(func(r *kgo.Record) {
			var d Dispatch
			if json.Unmarshal(r.Value, &d) != nil || d.Kind == "cancel" { // this example's handlers do not stop early
				return
			}
			w.mu.Lock()
			w.beat = time.Duration(max(0.5, min(5, d.LeaseS/3)) * float64(time.Second))
			w.mu.Unlock()
			if float64(d.DispatchedAtUs)/1e6+d.LeaseS-w.beat.Seconds() < float64(time.Now().UnixMicro())/1e6 {
				return // its lease all but lapsed: the owner retries it
			}
			slots <- struct{}{}
			key := fmt.Sprintf("%s/%d", d.JobID, d.Attempt)
			w.mu.Lock()
			w.running[key] = d
			w.mu.Unlock()
			fmt.Printf("{\"taken\":%q,\"attempt\":%d}\n", d.JobID, d.Attempt)
			select {
			case wake <- struct{}{}:
			default:
			}
			go func() {
				defer func() { w.mu.Lock(); delete(w.running, key); w.mu.Unlock(); <-slots }()
				w.run(context.Background(), d)
			}()
		})
	}
	w.heartbeat(context.Background(), true)
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "epochq-worker:", err)
		os.Exit(1)
	}
}
