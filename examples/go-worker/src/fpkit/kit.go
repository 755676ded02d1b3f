// Package fpkit keeps the fenceproof worker contract (docs/worker-protocol.md) and nothing of the
// protocol: the flags, the command loop on stdin (one goroutine per command, answered by exactly
// one event), events on stdout and in --events, the fault points (barriers), the metrics text, the
// secret store and the client of the harness's fake tools. A team keeps this package as it is and
// plugs its own protocol code in behind a Handler.
package fpkit

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Flags are the worker's command-line flags (the contract's "Flags" table).
type Flags struct {
	DatabaseURL      string
	Owner            string
	Events           string
	SecretsDir       string
	TraceID          string
	WritePath        string
	ToolsAddr        string
	Tenant           string
	AcquireTimeoutMs int64
	CommandTimeoutMs int64

	Script         bool
	RunID          string
	Steps          int64
	PaceMs         int64
	TTLms          int64
	HeartbeatMs    int64
	RenewTimeoutMs int64
}

// ParseFlags parses the contract's flags; an unknown or malformed flag exits with status 2.
func ParseFlags(args []string) *Flags {
	f := &Flags{}
	fs := flag.NewFlagSet("fenceproof-go-worker", flag.ContinueOnError)
	fs.StringVar(&f.DatabaseURL, "database-url", "", "libpq URI of the database (password in PGPASSWORD)")
	fs.StringVar(&f.Owner, "owner", "", "this process's owner id, also its application_name")
	fs.StringVar(&f.Events, "events", "", "append every event to this file too")
	fs.StringVar(&f.SecretsDir, "secrets-dir", "", "the secret store (created when missing)")
	fs.StringVar(&f.TraceID, "trace-id", "", "put on every log line")
	fs.StringVar(&f.WritePath, "write-path", "api", "api (fp_* functions) or direct (statements on the tables)")
	fs.StringVar(&f.ToolsAddr, "tools-addr", "", "HOST:PORT of the fake tools (dispatchers, reconcilers)")
	fs.StringVar(&f.Tenant, "tenant", "tenant1", "tenant of the operation ids")
	fs.Int64Var(&f.AcquireTimeoutMs, "acquire-timeout-ms", 10000, "how long to wait for a database connection")
	fs.Int64Var(&f.CommandTimeoutMs, "command-timeout-ms", 30000, "accepted; the harness bounds commands")
	fs.BoolVar(&f.Script, "script", false, "scripted mode: run one whole task alone")
	fs.StringVar(&f.RunID, "run-id", "", "scripted mode: the run")
	fs.Int64Var(&f.Steps, "steps", 3, "scripted mode: checkpoints")
	fs.Int64Var(&f.PaceMs, "pace-ms", 0, "scripted mode: pause between checkpoints")
	fs.Int64Var(&f.TTLms, "ttl-ms", 5000, "scripted mode: lease TTL")
	fs.Int64Var(&f.HeartbeatMs, "heartbeat-ms", 1000, "scripted mode: heartbeat interval")
	fs.Int64Var(&f.RenewTimeoutMs, "renew-timeout-ms", 1000, "scripted mode: renewal timeout")
	listMutants := fs.Bool("list-mutants", false, "this build has no mutants: exits 1")
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	if *listMutants {
		fmt.Fprintln(os.Stderr, "this worker has no built-in mutants")
		os.Exit(1)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", fs.Args())
		os.Exit(2)
	}
	if f.DatabaseURL == "" || f.Owner == "" || f.Events == "" {
		fmt.Fprintln(os.Stderr, "--database-url, --owner and --events are required")
		os.Exit(2)
	}
	if f.WritePath != "api" && f.WritePath != "direct" {
		fmt.Fprintf(os.Stderr, "--write-path must be api or direct, not %q\n", f.WritePath)
		os.Exit(2)
	}
	return f
}

// Faults are a command's fault points: barriers the harness holds by advisory lock key.
type Faults struct {
	Barriers []Barrier `json:"barriers"`
}

// Barrier is one fault point: at Point the worker waits on the shared advisory lock Key.
type Barrier struct {
	Point string `json:"point"`
	Key   int64  `json:"key"`
}

// Command is one command line; fields absent from a command keep their zero value (or nil).
type Command struct {
	ID               int64           `json:"id"`
	Cmd              string          `json:"cmd"`
	RunID            string          `json:"run_id"`
	TTLms            int64           `json:"ttl_ms"`
	HeartbeatMs      int64           `json:"heartbeat_ms"`
	RenewTimeoutMs   int64           `json:"renew_timeout_ms"`
	ExpectedRevision *int64          `json:"expected_revision"`
	Checkpoint       json.RawMessage `json:"checkpoint"`
	Faults           *Faults         `json:"faults"`
	StepID           string          `json:"step_id"`
	Tool             string          `json:"tool"`
	Request          json.RawMessage `json:"request"`
	EffectVersion    *int64          `json:"effect_version"`
	ClaimTTLms       *int64          `json:"claim_ttl_ms"`
	CallTimeoutMs    *int64          `json:"call_timeout_ms"`
	Limit            *int64          `json:"limit"`
	OperationID      string          `json:"operation_id"`
	TaskID           string          `json:"task_id"`
}

// Refused ends a command with a definite outcome other than ok (a contract outcome word).
type Refused struct {
	Outcome string
	Detail  string
}

func (r *Refused) Error() string { return r.Outcome + ": " + r.Detail }

// Refuse makes a Refused error.
func Refuse(outcome, format string, args ...interface{}) error {
	return &Refused{Outcome: outcome, Detail: fmt.Sprintf(format, args...)}
}

// Position is what an event reports of the lease and revision the worker holds.
type Position struct {
	RunID    *string
	Epoch    *int64
	Revision *int64
}

// Handler runs commands; the kit answers each with one event.
type Handler interface {
	// Handle runs one command and answers its data (nil for none) or an error; a *Refused names
	// the outcome, any other error is answered "error".
	Handle(c *Command) (interface{}, error)
	// Position is the lease and revision held now, for the events.
	Position() Position
}

// Kit writes the events of one process.
type Kit struct {
	Flags   *Flags
	Metrics *Metrics
	handler Handler
	mu      sync.Mutex
	events  *os.File
}

// New opens the events file.
func New(f *Flags) (*Kit, error) {
	ev, err := os.OpenFile(f.Events, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Kit{Flags: f, Metrics: NewMetrics(), events: ev}, nil
}

// SetHandler sets the command handler (and the source of the events' positions).
func (k *Kit) SetHandler(h Handler) { k.handler = h }

type event struct {
	Time     string      `json:"time"`
	Owner    string      `json:"owner"`
	RunID    *string     `json:"run_id"`
	Epoch    *int64      `json:"epoch"`
	Revision *int64      `json:"revision"`
	Event    string      `json:"event"`
	ID       *int64      `json:"id"`
	Outcome  string      `json:"outcome"`
	Detail   *string     `json:"detail,omitempty"`
	Data     interface{} `json:"data,omitempty"`
}

// Emit prints one event, whole, on stdout and in the events file. id 0 is an event nobody asked for.
func (k *Kit) Emit(name string, id int64, outcome, detail string, data interface{}) {
	ev := event{Time: time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), Owner: k.Flags.Owner,
		Event: name, Outcome: outcome, Data: data}
	if k.handler != nil {
		p := k.handler.Position()
		ev.RunID, ev.Epoch, ev.Revision = p.RunID, p.Epoch, p.Revision
	}
	if id > 0 {
		ev.ID = &id
	}
	if detail != "" {
		ev.Detail = &detail
	}
	line, err := json.Marshal(ev)
	if err != nil {
		line, _ = json.Marshal(event{Time: ev.Time, Owner: ev.Owner, Event: name, ID: ev.ID, Outcome: "error",
			Detail: strptr("event not encodable: " + err.Error())})
	}
	line = append(line, '\n')
	k.mu.Lock()
	defer k.mu.Unlock()
	_, _ = k.events.Write(line)
	_, _ = os.Stdout.Write(line)
}

func strptr(s string) *string { return &s }

// Logf writes one log line to stderr with the trace id.
func (k *Kit) Logf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "%s trace=%s owner=%s %s\n", time.Now().UTC().Format(time.RFC3339Nano),
		k.Flags.TraceID, k.Flags.Owner, fmt.Sprintf(format, args...))
}

// Answer runs one command and emits its one answer; true when it answered ok.
func (k *Kit) Answer(c *Command) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			k.Emit(c.Cmd, c.ID, "error", fmt.Sprintf("panic: %v", r), nil)
			ok = false
		}
	}()
	data, err := k.handler.Handle(c)
	if err == nil {
		k.Emit(c.Cmd, c.ID, "ok", "", data)
		return true
	}
	var r *Refused
	if errors.As(err, &r) {
		k.Emit(c.Cmd, c.ID, r.Outcome, r.Detail, nil)
	} else {
		k.Emit(c.Cmd, c.ID, "error", err.Error(), nil)
	}
	return false
}

// Loop reads commands from stdin, one per line, each run in a goroutine of its own (commands run
// concurrently); `exit` waits for the commands in flight, answers and exits 0, as does EOF.
func (k *Kit) Loop(in io.Reader) {
	r := bufio.NewReaderSize(in, 1<<20)
	var inflight sync.WaitGroup
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && len(trimSpace(line)) > 0 {
			var c Command
			if perr := json.Unmarshal(line, &c); perr != nil || c.ID <= 0 || c.Cmd == "" {
				var probe struct {
					ID int64 `json:"id"`
				}
				_ = json.Unmarshal(line, &probe)
				why := "a command is an object with an integer id and a string cmd"
				if perr != nil {
					why = perr.Error()
				}
				k.Emit("bad_command", probe.ID, "error", fmt.Sprintf("%s: %.200s", why, trimSpace(line)), nil)
			} else if c.Cmd == "exit" {
				inflight.Wait()
				k.Answer(&c)
				os.Exit(0)
			} else {
				inflight.Add(1)
				go func(c *Command) {
					defer inflight.Done()
					k.Answer(c)
				}(&c)
			}
		}
		if err != nil {
			os.Exit(0)
		}
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}
