// The request digest (spec §08). Kept in a file of its own, apart from the canonical JSON it
// hashes (canonical.go), so that a variant of this worker (cli/tests/variants/go) replaces exactly
// this file and nothing else.

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
	return Canonical(body)
}
