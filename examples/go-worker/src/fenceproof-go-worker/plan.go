// The plan command: one business intent registered with its checkpoint. Kept in a file of its own
// (as digest.go is in package protocol), so that a variant of this worker (cli/tests/variants/go)
// replaces exactly this file and nothing else.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"fpkit"
	"protocol"
)

func validName(s string) bool {
	return s != "" && !strings.ContainsRune(s, '/') && strings.IndexFunc(s, unicode.IsSpace) < 0
}

// plan registers a step's intent with the "step planned" checkpoint in one protected transaction.
func (w *worker) plan(ctx context.Context, c *fpkit.Command) (interface{}, error) {
	l, _, err := w.held()
	if err != nil {
		return nil, err
	}
	tenant, step, tool := w.kit.Flags.Tenant, c.StepID, c.Tool
	version := int64(1)
	if c.EffectVersion != nil {
		version = *c.EffectVersion
	}
	for _, f := range [][2]string{{"tenant", tenant}, {"step_id", step}, {"tool", tool}} {
		if !validName(f[1]) {
			return nil, fpkit.Refuse("invalid_intent", "%s %q must be non-empty, without '/' or spaces", f[0], f[1])
		}
	}
	if version <= 0 {
		return nil, fpkit.Refuse("invalid_intent", "effect_version must be > 0")
	}
	// One business intent, one id: tenant / run / step / effect version; never an owner, an epoch,
	// a retry count or a time (spec §08).
	operationID := fmt.Sprintf("%s/%s/%s/v%d", tenant, l.RunID, step, version)
	if len(c.Request) == 0 {
		return nil, fpkit.Refuse("invalid_intent", "plan needs a request")
	}
	raw, err := fpkit.DecodeJSON(c.Request)
	if err != nil {
		return nil, fpkit.Refuse("invalid_intent", "request: %v", err)
	}
	found := map[string]string{}
	masked, err := fpkit.Mask(raw, found)
	if err != nil {
		return nil, err
	}
	if len(found) > 0 && w.secrets == nil {
		return nil, fpkit.Refuse("invalid_intent", "a request with secret fields needs --secrets-dir")
	}
	for name, value := range found {
		if err := w.secrets.Put(operationID, name, value); err != nil {
			return nil, fmt.Errorf("secret store: %v", err)
		}
	}
	request, err := json.Marshal(masked)
	if err != nil {
		return nil, err
	}
	digest, err := protocol.Digest(request)
	if err != nil {
		return nil, fpkit.Refuse("invalid_intent", "request: %v", err)
	}
	input, _ := protocol.DigestInput(request)
	intent := &protocol.Intent{OperationID: operationID, StepID: step, EffectVersion: version, Tool: tool,
		Digest: digest, Request: request}
	checkpoint, _ := json.Marshal(map[string]string{"planned": step, "operation_id": operationID})
	rev, registration, err := w.transition(ctx, "plan", "running", "running", checkpoint, c.ExpectedRevision, c.Faults, "", intent)
	if err != nil {
		return nil, err
	}
	return map[string]interface{}{"operation_id": operationID, "registration": registration, "revision": rev,
		"digest_input": input}, nil
}
