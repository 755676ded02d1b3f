// A variant of the Go example worker for cli/tests/go_bug_classes.rs: the example's digest.go (a
// copy, built in its place with `go build -overlay`) whose digest hashes the request's JSON text
// as it is, not its RFC 8785 canonical JSON.

package protocol

import (
	"crypto/sha256"
	"encoding/hex"
)

// Digest is the request digest of an intent (spec §08): the lowercase hex SHA-256 of the body's
// RFC 8785 canonical JSON text, never of the JSON bytes as they happen to arrive.
func Digest(body []byte) (string, error) {
	text, err := DigestInput(body)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:]), nil
}

// DigestInput is the text Digest hashes: the body's RFC 8785 canonical JSON. The plan answer
// reports it (data.digest_input), so a deviation shows where the text differs.
func DigestInput(body []byte) (string, error) {
	// The bug: Go's own JSON text (json.Marshal sorts keys by bytes, not by UTF-16 units).
	return string(body), nil
}
