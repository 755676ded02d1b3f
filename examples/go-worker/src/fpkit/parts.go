package fpkit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// ---------------------------------------------------------------------------------------------
// Metrics: the series and label values the contract names (spec §12), as Prometheus text.

// Metrics counts this process's events.
type Metrics struct {
	mu            sync.Mutex
	counters      map[string]int64
	oldestUnknown float64
}

// NewMetrics makes empty counters.
func NewMetrics() *Metrics { return &Metrics{counters: map[string]int64{}} }

// Inc adds one to a series: Inc("lease_renew_total", "outcome", "lost"); label "" for none.
func (m *Metrics) Inc(name, label, value string) {
	m.mu.Lock()
	m.counters[name+"|"+label+"|"+value]++
	m.mu.Unlock()
}

// SetOldestUnknown sets the age of the oldest unknown operation, as a reconciler last saw it.
func (m *Metrics) SetOldestUnknown(seconds float64) {
	m.mu.Lock()
	m.oldestUnknown = seconds
	m.mu.Unlock()
}

// Text renders the metrics in the Prometheus text format.
func (m *Metrics) Text() string {
	series := []struct {
		name, label string
		values      []string
	}{
		{"lease_acquire_total", "outcome", []string{"success", "busy", "missing", "db_error"}},
		{"lease_renew_total", "outcome", []string{"success", "lost", "unknown"}},
		{"protected_write_rejected_total", "reason", []string{"lease", "state", "revision"}},
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	for _, s := range series {
		fmt.Fprintf(&b, "# TYPE %s counter\n", s.name)
		for _, v := range s.values {
			fmt.Fprintf(&b, "%s{%s=%q} %d\n", s.name, s.label, v, m.counters[s.name+"|"+s.label+"|"+v])
		}
	}
	fmt.Fprintf(&b, "# TYPE tool_operation_unknown_total counter\ntool_operation_unknown_total %d\n",
		m.counters["tool_operation_unknown_total||"])
	fmt.Fprintf(&b, "# TYPE tool_operation_oldest_unknown_age_seconds gauge\ntool_operation_oldest_unknown_age_seconds %.3f\n",
		m.oldestUnknown)
	return b.String()
}

// ---------------------------------------------------------------------------------------------
// Fault points.

// InTx is the hook for the in-transaction points (after_begin, after_lease_validated,
// before_commit): it waits on the shared transaction-level advisory lock of each barrier armed at
// that point, inside the transaction, so the worker waits inside PostgreSQL while the harness
// holds the key.
func (f *Faults) InTx(ctx context.Context, tx pgx.Tx, point string) error {
	if f == nil {
		return nil
	}
	for _, b := range f.Barriers {
		if b.Point == point {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, b.Key); err != nil {
				return fmt.Errorf("barrier %s: %w", point, err)
			}
		}
	}
	return nil
}

// Outside passes a point outside any transaction (before_result_write): the session-level shared
// lock, then its unlock, on one session.
func (f *Faults) Outside(ctx context.Context, db *pgxpool.Pool, point string) error {
	if f == nil {
		return nil
	}
	for _, b := range f.Barriers {
		if b.Point != point {
			continue
		}
		c, err := db.Acquire(ctx)
		if err != nil {
			return err
		}
		_, err = c.Exec(ctx, `SELECT pg_advisory_lock_shared($1)`, b.Key)
		if err == nil {
			_, err = c.Exec(ctx, `SELECT pg_advisory_unlock_shared($1)`, b.Key)
		}
		c.Release()
		if err != nil {
			return fmt.Errorf("barrier %s: %w", point, err)
		}
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// Secrets: {"$secret": {"name": N, "value": V}} in a plan request is stored under the operation_id
// and registered as {"$secret": N}; a dispatcher puts V back right before the remote call.

// SecretStore keeps one file per value, mode 0600, in the --secrets-dir (created when missing).
type SecretStore struct{ dir string }

// OpenSecrets creates the folder when it does not exist.
func OpenSecrets(dir string) (*SecretStore, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &SecretStore{dir: dir}, nil
}

func (s *SecretStore) path(operationID, name string) string {
	sum := sha256.Sum256([]byte(operationID + "\n" + name))
	return filepath.Join(s.dir, "go-"+hex.EncodeToString(sum[:]))
}

// Put stores a value durably.
func (s *SecretStore) Put(operationID, name, value string) error {
	p := s.path(operationID, name)
	f, err := os.OpenFile(p+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.WriteString(value); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}

// Get reads a value; ok false when none is stored.
func (s *SecretStore) Get(operationID, name string) (string, bool) {
	if s == nil {
		return "", false
	}
	b, err := os.ReadFile(s.path(operationID, name))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// DecodeJSON decodes a JSON document keeping numbers as written (json.Number).
func DecodeJSON(b []byte) (interface{}, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v interface{}
	err := dec.Decode(&v)
	return v, err
}

// Mask replaces each secret field by its reference and collects the values by name.
func Mask(v interface{}, found map[string]string) (interface{}, error) {
	switch x := v.(type) {
	case map[string]interface{}:
		if inner, has := x["$secret"]; has {
			m, ok := inner.(map[string]interface{})
			name, nok := m["name"].(string)
			value, vok := m["value"].(string)
			if len(x) != 1 || !ok || len(m) != 2 || !nok || !vok {
				return nil, Refuse("invalid_intent", `a $secret field must be {"name": str, "value": str}`)
			}
			if _, dup := found[name]; dup {
				return nil, Refuse("invalid_intent", "secret %s is named twice", name)
			}
			found[name] = value
			return map[string]interface{}{"$secret": name}, nil
		}
		out := make(map[string]interface{}, len(x))
		for k, e := range x {
			m, err := Mask(e, found)
			if err != nil {
				return nil, err
			}
			out[k] = m
		}
		return out, nil
	case []interface{}:
		out := make([]interface{}, len(x))
		for i, e := range x {
			m, err := Mask(e, found)
			if err != nil {
				return nil, err
			}
			out[i] = m
		}
		return out, nil
	}
	return v, nil
}

// Unmask puts the stored values back; an error when a reference has no stored value.
func (s *SecretStore) Unmask(v interface{}, operationID string) (interface{}, error) {
	switch x := v.(type) {
	case map[string]interface{}:
		if name, ok := x["$secret"].(string); ok && len(x) == 1 {
			value, ok := s.Get(operationID, name)
			if !ok {
				return nil, fmt.Errorf("secret %s of %s is not in the store", name, operationID)
			}
			return value, nil
		}
		out := make(map[string]interface{}, len(x))
		for k, e := range x {
			u, err := s.Unmask(e, operationID)
			if err != nil {
				return nil, err
			}
			out[k] = u
		}
		return out, nil
	case []interface{}:
		out := make([]interface{}, len(x))
		for i, e := range x {
			u, err := s.Unmask(e, operationID)
			if err != nil {
				return nil, err
			}
			out[i] = u
		}
		return out, nil
	}
	return v, nil
}

// ---------------------------------------------------------------------------------------------
// The harness's fake tools (docs/fake-tools.md): plain HTTP, one request per connection.

// Tools calls the fake tools at --tools-addr.
type Tools struct{ Addr string }

// ErrCallFailed: the call failed in transport (timeout, dropped connection): its outcome is unknown.
var ErrCallFailed = errors.New("the call failed after it was sent")

// Call sends one request and answers the status and the decoded JSON answer (or its text).
func (t *Tools) Call(ctx context.Context, method, path string, body interface{}, timeout time.Duration) (int, interface{}, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+t.Addr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("content-type", "application/json")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrCallFailed, err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrCallFailed, err)
	}
	if len(bytes.TrimSpace(text)) == 0 {
		return resp.StatusCode, nil, nil
	}
	v, err := DecodeJSON(text)
	if err != nil {
		return resp.StatusCode, string(text), nil
	}
	return resp.StatusCode, v, nil
}

// PathEscape percent-encodes one path segment (operation ids contain '/').
func PathEscape(s string) string { return url.PathEscape(s) }
