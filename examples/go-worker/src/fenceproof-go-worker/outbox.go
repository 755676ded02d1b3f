package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"fpkit"
	"protocol"
)

// The capability class of each fake tool (docs/fake-tools.md, spec §09).
var capability = map[string]string{
	"idem": "idempotency_key", "detid": "deterministic_id", "opquery": "operation_query", "plain": "neither",
}

// answer is what a remote call or query established: a settled status ("succeeded",
// "failed_final") with its remote id and result, "absent", or "unknown" with why.
type answer struct {
	status   string
	remoteID string
	result   interface{}
}

func orDefault(v *int64, d int64) int64 {
	if v == nil {
		return d
	}
	return *v
}

func field(v interface{}, name string) (string, bool) {
	m, ok := v.(map[string]interface{})
	if !ok {
		return "", false
	}
	s, ok := m[name].(string)
	return s, ok
}

// create calls POST /tools/<tool>/create with the operation_id, secrets put back, no transaction open.
func (w *worker) create(ctx context.Context, tool, operationID string, request []byte, timeout time.Duration) answer {
	body, err := fpkit.DecodeJSON(request)
	if err != nil {
		return answer{"failed_final", "", map[string]string{"not_called": "request: " + err.Error()}}
	}
	if body, err = w.secrets.Unmask(body, operationID); err != nil {
		return answer{"failed_final", "", map[string]string{"not_called": err.Error()}}
	}
	status, v, err := w.tools.Call(ctx, "POST", "/tools/"+fpkit.PathEscape(tool)+"/create",
		map[string]interface{}{"operation_id": operationID, "request": body}, timeout)
	if err != nil {
		return answer{"unknown", "", fmt.Sprintf("the call failed after it was sent: %v", err)}
	}
	own, _ := field(v, "operation_id")
	if status == 200 || status == 201 || (status == 409 && own == operationID) {
		rid, _ := field(v, "resource_id")
		return answer{"succeeded", rid, v}
	}
	if status >= 400 && status < 500 {
		return answer{"failed_final", "", map[string]interface{}{"status": status, "answer": v}}
	}
	return answer{"unknown", "", fmt.Sprintf("HTTP %d: %v", status, v)}
}

// query asks the tool what became of an operation, per its capability.
func (w *worker) query(ctx context.Context, op protocol.Operation, timeout time.Duration) answer {
	var path string
	switch capability[op.Tool] {
	case "deterministic_id":
		body, _ := fpkit.DecodeJSON(op.Request)
		name, ok := field(body, "name")
		if !ok {
			return answer{"unknown", "", "request has no deterministic id"}
		}
		path = "/tools/" + fpkit.PathEscape(op.Tool) + "/resources/" + fpkit.PathEscape(name)
	case "idempotency_key", "operation_query":
		path = "/tools/" + fpkit.PathEscape(op.Tool) + "/operations/" + fpkit.PathEscape(op.OperationID)
	default:
		return answer{"unknown", "", "the tool offers no query"}
	}
	status, v, err := w.tools.Call(ctx, "GET", path, nil, timeout)
	if err != nil {
		return answer{"unknown", "", fmt.Sprintf("query failed: %v", err)}
	}
	switch status {
	case 200:
		resource := v
		if m, ok := v.(map[string]interface{}); ok {
			if list, ok := m["resources"].([]interface{}); ok && len(list) > 0 {
				resource = list[0]
			}
		}
		if own, _ := field(resource, "operation_id"); own == op.OperationID {
			rid, _ := field(resource, "resource_id")
			return answer{"succeeded", rid, resource}
		}
		return answer{"failed_final", "", map[string]interface{}{"taken_by_other_intent": resource}}
	case 404:
		return answer{"absent", "", nil}
	}
	return answer{"unknown", "", fmt.Sprintf("query answered HTTP %d: %v", status, v)}
}

type dispatchEntry struct {
	OperationID string  `json:"operation_id"`
	Tool        string  `json:"tool"`
	Outcome     string  `json:"outcome"`
	Detail      *string `json:"detail"`
}

// dispatch is one dispatcher pass (spec §9.2, §9.3): claim, call each tool outside any
// transaction, then write each result under the claim; a write the database refuses is reported.
func (w *worker) dispatch(ctx context.Context, c *fpkit.Command) (interface{}, error) {
	if w.tools == nil {
		return nil, fpkit.Refuse("invalid_intent", "this worker was started without --tools-addr")
	}
	timeout := time.Duration(orDefault(c.CallTimeoutMs, 5000)) * time.Millisecond
	ops, err := w.store.Claim(ctx, orDefault(c.ClaimTTLms, 5000), orDefault(c.Limit, 1))
	if err != nil {
		return nil, outcome("claim", err)
	}
	report := []dispatchEntry{}
	for _, op := range ops {
		a := w.create(ctx, op.Tool, op.OperationID, op.Request, timeout)
		if err := c.Faults.Outside(ctx, w.store.DB, "before_result_write"); err != nil {
			return nil, outcome("dispatch", err)
		}
		var werr error
		if a.status == "succeeded" || a.status == "failed_final" {
			result, _ := json.Marshal(a.result)
			werr = w.store.RecordResult(ctx, op, a.status, a.remoteID, result)
		} else {
			why := fmt.Sprint(a.result)
			if a.status != "unknown" {
				why = "create answered " + a.status
			}
			a.status = "unknown"
			werr = w.store.MarkUnknownOwn(ctx, op, why)
			if werr == nil {
				w.kit.Metrics.Inc("tool_operation_unknown_total", "", "")
			}
		}
		e := dispatchEntry{OperationID: op.OperationID, Tool: op.Tool, Outcome: a.status}
		if errors.Is(werr, protocol.ErrClaimMoved) {
			d := "the claim is no longer ours (owner or revision moved)"
			e.Outcome, e.Detail = "write_rejected", &d
		} else if werr != nil {
			return nil, outcome("result write of "+op.OperationID, werr)
		}
		report = append(report, e)
	}
	return report, nil
}

type reconcileReport struct {
	MarkedUnknown []string   `json:"marked_unknown"`
	Converged     [][]string `json:"converged"`
	Raised        [][]string `json:"raised"`
}

// reconcile is one reconciler pass: expired claims to unknown as seen, then each unknown operation
// converged on the remote fact where the tool can prove it, and raised otherwise (never failed).
func (w *worker) reconcile(ctx context.Context, c *fpkit.Command) (interface{}, error) {
	if w.tools == nil {
		return nil, fpkit.Refuse("invalid_intent", "this worker was started without --tools-addr")
	}
	timeout := time.Duration(orDefault(c.CallTimeoutMs, 5000)) * time.Millisecond
	out := reconcileReport{MarkedUnknown: []string{}, Converged: [][]string{}, Raised: [][]string{}}
	expired, err := w.store.ExpiredClaims(ctx)
	if err != nil {
		return nil, outcome("reconcile", err)
	}
	for _, op := range expired {
		err := w.store.MarkExpiredUnknown(ctx, op)
		if err == nil {
			w.kit.Metrics.Inc("tool_operation_unknown_total", "", "")
			out.MarkedUnknown = append(out.MarkedUnknown, op.OperationID)
		} else if !errors.Is(err, protocol.ErrClaimMoved) {
			return nil, outcome("reconcile", err)
		}
	}
	unknown, age, err := w.store.Unknowns(ctx)
	if err != nil {
		return nil, outcome("reconcile", err)
	}
	w.kit.Metrics.SetOldestUnknown(age)
	for _, op := range unknown {
		var a answer
		switch capability[op.Tool] {
		case "idempotency_key":
			a = w.create(ctx, op.Tool, op.OperationID, op.Request, timeout)
		case "deterministic_id":
			if a = w.query(ctx, op, timeout); a.status == "absent" {
				a = w.create(ctx, op.Tool, op.OperationID, op.Request, timeout)
			}
		case "operation_query":
			if a = w.query(ctx, op, timeout); a.status == "absent" {
				a = answer{"unknown", "", "the tool has no record of it; its acceptance records may have gaps"}
			}
		case "neither":
			a = answer{"unknown", "", "the tool offers neither query nor idempotency"}
		default:
			a = answer{"unknown", "", "no adapter for tool " + op.Tool}
		}
		switch a.status {
		case "succeeded", "failed_final":
			result, _ := json.Marshal(a.result)
			err := w.store.Converge(ctx, op, a.status, a.remoteID, result)
			if errors.Is(err, protocol.ErrClaimMoved) {
				out.Raised = append(out.Raised, []string{op.OperationID, "the ledger moved on; nothing converged"})
			} else if err != nil {
				return nil, outcome("converge", err)
			} else {
				out.Converged = append(out.Converged, []string{op.OperationID, a.status})
			}
		case "unknown":
			out.Raised = append(out.Raised, []string{op.OperationID, fmt.Sprint(a.result)})
		default:
			out.Raised = append(out.Raised, []string{op.OperationID, a.status})
		}
	}
	return out, nil
}
