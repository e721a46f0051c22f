// Command epochq-worker is a remote epochq worker in Go (docs/workers.md): it reads the attempts the engines
// dispatch to its pool, runs each with a handler of handlers, heartbeats the fencing tokens of the attempts it
// runs (what renews their leases) with their progress, stops one on the owner's cancel, and reports each result
// as a ReportAttempt command (Avro single-object encoding, the newest schemas/vN/command.avsc, hamba/avro) keyed
// by the job id, with the records its handler produced, signed where a key file is given; with franz-go.
//
// It reads its partitions all the time, full or not (a cancel must reach it while every slot is busy): a
// dispatch it has no slot for yet is held in arrival order, and each partition's offset is committed no further
// than the first record it holds, so a worker that dies leaves those to the next reader.
//
//	epochq-worker [-schemas DIR] [-worker-id ID] [-concurrency N] [-key-file PEM] BOOTSTRAP NAMESPACE POOL
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	GraceS         float64 `json:"grace_s"` // a cancel's: how long the handler has to stop
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

// Record is one record a handler produced (ctx.produce), as ReportAttempt.records carries it (docs/workers.md).
type Record struct {
	Topic   string     `json:"topic"`
	Key     *string    `json:"key"`   // base64
	Value   *string    `json:"value"` // base64
	Headers [][]string `json:"headers"`
}

// Ctx is what a handler knows of its attempt, and what it may do: report progress, produce records (written by
// the owner with the job's success, exactly once; none if the attempt fails), see whether it was cancelled.
type Ctx struct {
	JobID        string
	Attempt      int32
	FencingToken int64
	a            *attempt
}

// Cancelled says whether the owner asked this attempt to stop: return (an error) soon.
func (c Ctx) Cancelled() bool { return c.a.cancelled.Load() }

// Progress reports how far the attempt is (0..1), sent with the next heartbeat.
func (c Ctx) Progress(value float64, message string) {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	c.a.progress, c.a.message = &value, message
}

// Produce adds a record to write with the job's success.
func (c Ctx) Produce(topic string, value, key []byte, headers map[string]string) {
	b64 := func(b []byte) *string {
		if b == nil {
			return nil
		}
		s := base64.StdEncoding.EncodeToString(b)
		return &s
	}
	r := Record{Topic: topic, Key: b64(key), Value: b64(value), Headers: [][]string{}}
	for name, v := range headers {
		r.Headers = append(r.Headers, []string{name, *b64([]byte(v))})
	}
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	c.a.records = append(c.a.records, r)
}

var errCancelled = errors.New("cancelled")

// handlers, by task type: each returns a JSON-able result, or an error.
var handlers = map[string]func(Ctx, map[string]any) (any, error){
	"remote.echo": func(c Ctx, p map[string]any) (any, error) {
		return map[string]any{"echo": p, "lang": "go", "pid": os.Getpid(), "token": c.FencingToken}, nil
	},
	"remote.slow": func(c Ctx, p map[string]any) (any, error) {
		seconds, _ := p["seconds"].(float64)
		for s := 1; s <= int(seconds); s++ {
			time.Sleep(time.Second)
			c.Progress(float64(s)/seconds, fmt.Sprintf("second %d of %d", s, int(seconds)))
		}
		return map[string]any{"attempt": c.Attempt, "lang": "go", "pid": os.Getpid()}, nil
	},
	"remote.emit": func(c Ctx, p map[string]any) (any, error) {
		topic, _ := p["topic"].(string)
		c.Produce(topic, []byte(fmt.Sprintf("attempt %d", c.Attempt)), []byte(c.JobID),
			map[string]string{"token": strconv.FormatInt(c.FencingToken, 10)})
		return map[string]any{"attempt": c.Attempt}, nil
	},
	"remote.until_cancelled": func(c Ctx, p map[string]any) (any, error) { // runs until asked to stop (at most 60 s)
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if c.Cancelled() {
				return nil, errCancelled
			}
		}
		return nil, nil
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

// attempt is one attempt taken: held for a slot, then running.
type attempt struct {
	d                Dispatch
	partition        int32
	offset           int64
	mu               sync.Mutex
	progress         *float64
	message          string
	records          []Record
	cancelled, ended atomic.Bool
	started          time.Time
}

type worker struct {
	id, namespace, pool, topic string
	concurrency                int
	client                     *kgo.Client
	schema                     avro.Schema
	key                        ed25519.PrivateKey // signs results; nil: unsigned
	mu                         sync.Mutex
	running                    map[string]*attempt // "job/attempt" -> the attempt
	held                       []*attempt          // taken, waiting for a slot, in arrival order
	readTo, marked             map[int32]int64     // per partition: the offset after the last record read; marked for commit
	beat                       time.Duration
	started                    int64
	wake                       chan struct{}
}

func (w *worker) heartbeat(ctx context.Context, tombstone bool) {
	w.mu.Lock()
	jobs, running := [][]any{}, []string{}
	for _, a := range w.running {
		a.mu.Lock()
		jobs = append(jobs, []any{a.d.JobID, a.d.FencingToken, a.progress, a.message})
		a.mu.Unlock()
		running = append(running, a.d.JobID)
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
		types := []string{}
		for name := range handlers {
			types = append(types, name)
		}
		sort.Strings(types)
		value, _ = json.Marshal(map[string]any{"format": 1, "instance": w.id, "host": "go", "pid": os.Getpid(),
			"started_at_us": w.started, "seen_at_us": time.Now().UnixMicro(), "interval_s": interval,
			"partitions": []any{}, "slots": [][]any{{"ANY", used, max(0, w.concurrency-used)}}, "running": running,
			"task_types": types, "pool": w.pool, "jobs": jobs})
	}
	w.client.ProduceSync(ctx, &kgo.Record{Topic: w.namespace + ".workers", Key: []byte(w.id), Value: value})
}

// take is one record of the dispatch topic: a dispatch to hold until a slot is free, or a cancel.
func (w *worker) take(r *kgo.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.readTo[r.Partition] = max(w.readTo[r.Partition], r.Offset+1)
	var d Dispatch
	if json.Unmarshal(r.Value, &d) != nil {
		return
	}
	if d.Kind == "cancel" {
		w.cancel(d)
		return
	}
	w.beat = time.Duration(max(0.5, min(5, d.LeaseS/3)) * float64(time.Second))
	if !w.lapsing(d) { // else its lease all but lapsed: the owner retries it
		w.held = append(w.held, &attempt{d: d, partition: r.Partition, offset: r.Offset})
	}
}

// lapsing says whether less than one heartbeat of d's lease is left: no heartbeat could renew it in time.
func (w *worker) lapsing(d Dispatch) bool {
	return float64(d.DispatchedAtUs)/1e6+d.LeaseS-w.beat.Seconds() < float64(time.Now().UnixMicro())/1e6
}

// cancel is the owner's cancel (w.mu held): a running attempt's Cancelled() turns true and it has grace_s to
// end, else it is reported cancelled; one held for a slot never starts and is reported cancelled at once.
func (w *worker) cancel(c Dispatch) {
	for i, a := range w.held {
		if a.d.JobID == c.JobID && a.d.Attempt == c.Attempt && a.d.FencingToken == c.FencingToken {
			w.held = append(w.held[:i], w.held[i+1:]...)
			a.started = time.Now()
			go w.finish(a, "cancelled", nil, errors.New("cancelled before it started"))
			return
		}
	}
	a := w.running[fmt.Sprintf("%s/%d", c.JobID, c.Attempt)]
	if a == nil || a.d.FencingToken != c.FencingToken {
		return
	}
	a.cancelled.Store(true)
	time.AfterFunc(time.Duration(c.GraceS*float64(time.Second)), func() {
		w.finish(a, "cancelled", nil, fmt.Errorf("did not stop within %gs of its cancel", c.GraceS))
	})
}

// pump starts held attempts while slots are free (skipping one whose lease all but lapsed while held) and marks
// each partition's offset for commit up to its first held record.
func (w *worker) pump() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.held) > 0 && len(w.running) < w.concurrency {
		a := w.held[0]
		w.held = w.held[1:]
		if w.lapsing(a.d) {
			continue
		}
		a.started = time.Now()
		w.running[fmt.Sprintf("%s/%d", a.d.JobID, a.d.Attempt)] = a
		fmt.Printf("{\"taken\":%q,\"attempt\":%d}\n", a.d.JobID, a.d.Attempt)
		select {
		case w.wake <- struct{}{}:
		default:
		}
		go w.run(a)
	}
	due := map[int32]kgo.EpochOffset{}
	for p, end := range w.readTo {
		at := end
		for _, a := range w.held {
			if a.partition == p {
				at = min(at, a.offset)
			}
		}
		if at != w.marked[p] {
			w.marked[p], due[p] = at, kgo.EpochOffset{Epoch: -1, Offset: at}
		}
	}
	if len(due) > 0 {
		w.client.MarkCommitOffsets(map[string]map[int32]kgo.EpochOffset{w.topic: due})
	}
}

// revoked: partitions gone to another worker; the dispatches held from them are its now (never committed past).
func (w *worker) revoked(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range gone[w.topic] {
		kept := w.held[:0]
		for _, a := range w.held {
			if a.partition != p {
				kept = append(kept, a)
			}
		}
		w.held = kept
		delete(w.readTo, p)
		delete(w.marked, p)
	}
}

func (w *worker) run(a *attempt) {
	var payload map[string]any
	raw, err := base64.StdEncoding.DecodeString(a.d.Payload.Data)
	if err == nil {
		err = json.Unmarshal(raw, &payload)
	}
	var result any
	if handler, ok := handlers[a.d.TaskType]; !ok {
		err = fmt.Errorf("no handler for task type %s", a.d.TaskType)
	} else if err == nil {
		result, err = handler(Ctx{a.d.JobID, a.d.Attempt, a.d.FencingToken, a}, payload)
	}
	switch {
	case err != nil && a.cancelled.Load():
		w.finish(a, "cancelled", nil, err)
	case err != nil:
		w.finish(a, "failed", nil, err)
	default:
		w.finish(a, "succeeded", result, nil)
	}
}

// finish reports how attempt a ended, once (a handler that ends after its cancel's grace is not reported again),
// and frees its slot.
func (w *worker) finish(a *attempt, outcome string, result any, err error) {
	if a.ended.Swap(true) {
		return
	}
	body := ReportAttempt{Attempt: a.d.Attempt, FencingToken: a.d.FencingToken, Outcome: outcome, Retryable: true,
		Worker: w.id, Pool: w.pool, DurationUs: time.Since(a.started).Microseconds()}
	if err != nil {
		body.ErrorType, body.Message = "Error", err.Error()
	} else {
		encoded, _ := json.Marshal(result)
		body.Result = &encoded
		a.mu.Lock()
		if len(a.records) > 0 {
			records, _ := json.Marshal(a.records)
			body.Records = &records
		}
		a.mu.Unlock()
	}
	w.report(a.d, body)
	w.mu.Lock()
	delete(w.running, fmt.Sprintf("%s/%d", a.d.JobID, a.d.Attempt))
	w.mu.Unlock()
	w.pump()
}

func (w *worker) report(d Dispatch, body ReportAttempt) {
	envelope := CommandEnvelope{CommandID: uuid4(), JobID: d.JobID, TenantID: d.Tenant, IssuedAt: time.Now().UnixMicro(),
		Body: body}
	value, err := avro.Marshal(w.schema, envelope)
	if err != nil {
		fmt.Fprintln(os.Stderr, "epochq-worker: encoding the result:", err)
		return
	}
	fingerprint, _ := w.schema.FingerprintUsing(avro.CRC64AvroLE)
	value = append(append([]byte{0xc3, 0x01}, fingerprint...), value...)
	topic := w.namespace + ".commands"
	record := &kgo.Record{Topic: topic, Key: []byte(d.JobID), Value: value}
	if w.key != nil { // docs/security.md: Ed25519 over "epochq-command-v1" 0 <topic> 0 <the record's value>
		signed := append([]byte("epochq-command-v1\x00"+topic+"\x00"), value...)
		record.Headers = []kgo.RecordHeader{{Key: "epochq-signature", Value: ed25519.Sign(w.key, signed)}}
	}
	if err := w.client.ProduceSync(context.Background(), record).FirstErr(); err != nil {
		fmt.Fprintln(os.Stderr, "epochq-worker: reporting the result:", err)
	}
}

func loadKey(path string) (ed25519.PrivateKey, error) {
	if path == "" {
		return nil, nil
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(text)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ed, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", path)
	}
	return ed, nil
}

func run() error {
	exe, _ := os.Executable()
	schemas := flag.String("schemas", filepath.Join(filepath.Dir(exe), "..", "..", "..", "schemas"), "the schemas/ directory")
	id := flag.String("worker-id", fmt.Sprintf("go-worker-%d", os.Getpid()), "this worker's name in `epochq workers`")
	concurrency := flag.Int("concurrency", 4, "attempts run at once")
	keyFile := flag.String("key-file", os.Getenv("EPOCHQ_OPERATOR_KEY_FILE"), "an Ed25519 PEM key to sign results with")
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
	key, err := loadKey(*keyFile)
	if err != nil {
		return err
	}
	topic := namespace + ".dispatch." + pool
	w := &worker{id: *id, namespace: namespace, pool: pool, topic: topic, concurrency: *concurrency, schema: schema,
		key: key, running: map[string]*attempt{}, readTo: map[int32]int64{}, marked: map[int32]int64{},
		beat: time.Second, started: time.Now().UnixMicro(), wake: make(chan struct{}, 1)}
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ConsumerGroup(namespace+".pool."+pool), kgo.ConsumeTopics(topic),
		kgo.AutoCommitMarks(), // offsets marked by pump: never past a held dispatch
		kgo.OnPartitionsRevoked(w.revoked), kgo.OnPartitionsLost(w.revoked),
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
	w.client = client
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	fingerprint, _ := schema.FingerprintUsing(avro.CRC64AvroLE)
	if err := client.ProduceSync(ctx, &kgo.Record{Topic: namespace + ".schemas", Key: []byte(hex.EncodeToString(fingerprint)),
		Value: text, Headers: []kgo.RecordHeader{{Key: "subject", Value: []byte("command")},
			{Key: "version", Value: []byte(strconv.Itoa(version))}}}).FirstErr(); err != nil {
		return err
	}
	go func() { // an attempt taken: beat at once (w.wake), the owner renews its lease from now
		for ctx.Err() == nil {
			w.heartbeat(ctx, false)
			w.mu.Lock()
			beat := w.beat
			w.mu.Unlock()
			select {
			case <-time.After(beat):
			case <-w.wake:
			case <-ctx.Done():
			}
		}
	}()
	fmt.Printf("{\"worker\":%q,\"pool\":%q,\"pid\":%d}\n", w.id, pool, os.Getpid())
	for ctx.Err() == nil {
		fetches := client.PollFetches(ctx)
		fetches.EachRecord(w.take)
		w.pump() // never waits for a slot: the next record may be a cancel
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
