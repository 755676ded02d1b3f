// RFC 8785 (JSON Canonicalization Scheme): the canonical JSON text the request digest hashes.

package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Canonical is the RFC 8785 (JSON Canonicalization Scheme) text of a JSON document.
func Canonical(body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v interface{}
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	var b strings.Builder
	if err := canonical(&b, v); err != nil {
		return "", err
	}
	return b.String(), nil
}

func canonical(b *strings.Builder, v interface{}) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return fmt.Errorf("number %s: %w", x, err)
		}
		s, err := ES6Number(f)
		if err != nil {
			return err
		}
		b.WriteString(s)
	case float64:
		s, err := ES6Number(x)
		if err != nil {
			return err
		}
		b.WriteString(s)
	case string:
		quote(b, x)
	case []interface{}:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := canonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]interface{}:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		// Property names sort by their UTF-16 code units, not by code points or bytes.
		sort.Slice(keys, func(i, j int) bool { return lessUTF16(keys[i], keys[j]) })
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			quote(b, k)
			b.WriteByte(':')
			if err := canonical(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("not a JSON value: %T", v)
	}
	return nil
}

func lessUTF16(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

// quote writes a JSON string as RFC 8785 spells it: the two-character escapes for \b \t \n \f \r,
// " and \, \u00xx (lowercase hex) for the other control characters, every other character as is
// (UTF-8, no \u escapes, no HTML escaping).
func quote(b *strings.Builder, s string) {
	const hexdigits = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hexdigits[r>>4])
				b.WriteByte(hexdigits[r&0xf])
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// ES6Number spells a double as ECMAScript's Number::toString does (RFC 8785 §3.2.2.3): the
// shortest digits that round-trip, placed by the decimal exponent.
func ES6Number(v float64) (string, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "", fmt.Errorf("JSON has no %v", v)
	}
	if v == 0 {
		return "0", nil
	}
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	// Shortest round-trip digits d.ddd and exponent: v = 0.<digits> x 10^n.
	e := strconv.FormatFloat(v, 'e', -1, 64)
	mant, exp := e, 0
	if i := strings.IndexByte(e, 'e'); i >= 0 {
		mant = e[:i]
		x, err := strconv.Atoi(e[i+1:])
		if err != nil {
			return "", err
		}
		exp = x
	}
	digits := strings.Replace(mant, ".", "", 1)
	digits = strings.TrimRight(digits, "0")
	if digits == "" {
		digits = "0"
	}
	k, n := len(digits), exp+1
	var out string
	switch {
	case k <= n && n <= 21:
		out = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		out = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		out = "0." + strings.Repeat("0", -n) + digits
	default:
		x := n - 1
		out = digits[:1]
		if k > 1 {
			out += "." + digits[1:]
		}
		if x > 0 {
			out += "e+" + strconv.Itoa(x)
		} else {
			out += "e-" + strconv.Itoa(-x)
		}
	}
	return sign + out, nil
}
