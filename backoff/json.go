package backoff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// The fields of SNS's delivery-policy JSON, by object.
var (
	topFields     = []string{"healthyRetryPolicy", "sicklyRetryPolicy", "throttlePolicy", "requestPolicy", "guaranteed"}
	healthyFields = []string{"minDelayTarget", "maxDelayTarget", "numRetries", "numNoDelayRetries",
		"numMinDelayRetries", "numMaxDelayRetries", "backoffFunction"}
	throttleFields = []string{"maxReceivesPerSecond"}
	requestFields  = []string{"headerContentType"}
)

// HeaderContentTypes are the values SNS accepts for
// requestPolicy.headerContentType.
var HeaderContentTypes = []string{"text/plain", "application/json", "application/xml"}

// ParsePolicy parses and validates an SNS delivery policy in its JSON form
// and returns it as a custom policy with DefaultPolicyJitter:
//
//	{
//	  "healthyRetryPolicy": {
//	    "minDelayTarget": 1, "maxDelayTarget": 60, "numRetries": 50,
//	    "numNoDelayRetries": 3, "numMinDelayRetries": 2, "numMaxDelayRetries": 35,
//	    "backoffFunction": "exponential"
//	  },
//	  "throttlePolicy": {"maxReceivesPerSecond": 10},
//	  "requestPolicy": {"headerContentType": "application/json"}
//	}
//
// A missing field (or one set to null) takes SNS's default (see
// DefaultHealthyRetryPolicy); counts and delay targets must be integers
// (delays in seconds); backoffFunction is matched in any letter case. The
// deprecated sicklyRetryPolicy is accepted only as null and guaranteed only
// as false, as SNS does. Unknown or repeated fields, values of the wrong
// JSON type and data after the policy are refused. Every refusal is a
// *FieldError wrapping ErrInvalidPolicy that names the field, its value
// and what is allowed.
func ParsePolicy(data []byte) (*DeliveryPolicy, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top json.RawMessage
	if err := dec.Decode(&top); err != nil {
		return nil, syntaxError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, policyError("policy", nil, "want a single JSON object with nothing after it")
	}
	obj, err := object("policy", top, topFields)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, policyError("policy", "null", "a JSON object")
	}
	h := DefaultHealthyRetryPolicy()
	if raw := obj["healthyRetryPolicy"]; raw != nil {
		if err := parseHealthy(raw, &h); err != nil {
			return nil, err
		}
	}
	if raw := obj["sicklyRetryPolicy"]; raw != nil && !isNull(raw) {
		return nil, policyError("sicklyRetryPolicy", clip(raw), "null (deprecated; accepted for compatibility only)")
	}
	if raw := obj["guaranteed"]; raw != nil && !isNull(raw) && string(bytes.TrimSpace(raw)) != "false" {
		return nil, policyError("guaranteed", clip(raw), "false (deprecated; accepted for compatibility only)")
	}
	if err := h.validate(true); err != nil {
		return nil, err
	}
	p := &DeliveryPolicy{h: h, jitter: DefaultPolicyJitter}
	if t, err := object("throttlePolicy", obj["throttlePolicy"], throttleFields); err != nil {
		return nil, err
	} else if raw := t["maxReceivesPerSecond"]; raw != nil && !isNull(raw) {
		const f = "throttlePolicy.maxReceivesPerSecond"
		v, err := number(f, raw)
		if err != nil {
			return nil, err
		}
		if !(v >= 1) || math.IsInf(v, 0) {
			return nil, policyError(f, clip(raw), ">= 1")
		}
		p.maxReceives = v
	}
	if rq, err := object("requestPolicy", obj["requestPolicy"], requestFields); err != nil {
		return nil, err
	} else if raw := rq["headerContentType"]; raw != nil && !isNull(raw) {
		const f = "requestPolicy.headerContentType"
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, policyError(f, clip(raw), "a string")
		}
		if !validContentType(s) {
			return nil, policyError(f, strconv.Quote(s), "one of "+strings.Join(HeaderContentTypes, ", ")+
				" (optionally with parameters such as \"; charset=UTF-8\")")
		}
		p.contentType = s
	}
	return p, nil
}

func parseHealthy(raw json.RawMessage, h *HealthyRetryPolicy) error {
	obj, err := object("healthyRetryPolicy", raw, healthyFields)
	if err != nil || obj == nil {
		return err
	}
	ints := []struct {
		name string
		dst  *int
		want string
	}{
		{"minDelayTarget", &h.MinDelayTarget, "an integer number of seconds in 1..maxDelayTarget"},
		{"maxDelayTarget", &h.MaxDelayTarget, "an integer number of seconds in minDelayTarget..3600"},
		{"numRetries", &h.NumRetries, "an integer in 0..100"},
		{"numNoDelayRetries", &h.NumNoDelayRetries, "an integer >= 0"},
		{"numMinDelayRetries", &h.NumMinDelayRetries, "an integer >= 0"},
		{"numMaxDelayRetries", &h.NumMaxDelayRetries, "an integer >= 0"},
	}
	for _, f := range ints {
		v := obj[f.name]
		if v == nil || isNull(v) {
			continue
		}
		name := "healthyRetryPolicy." + f.name
		x, err := number(name, v)
		if err != nil {
			return err
		}
		// Anything beyond ±1e9 is out of every range (and may not fit an
		// int): refuse it here, as written.
		if x != math.Trunc(x) || math.Abs(x) > 1e9 {
			return policyError(name, clip(v), f.want)
		}
		*f.dst = int(x)
	}
	if v := obj["backoffFunction"]; v != nil && !isNull(v) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return policyError("healthyRetryPolicy.backoffFunction", clip(v),
				"a string: one of arithmetic, exponential, geometric, linear")
		}
		fn, err := ParseBackoffFunction(s)
		if err != nil {
			return err
		}
		h.BackoffFunction = fn
	}
	return nil
}

// object decodes raw as a JSON object with only the allowed keys, each at
// most once. A missing or null raw gives a nil map.
func object(path string, raw json.RawMessage, allowed []string) (map[string]json.RawMessage, error) {
	if raw == nil || isNull(raw) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, policyError(path, clip(raw), "a JSON object")
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(err)
		}
		key, _ := tok.(string)
		full := safeKey(key)
		if path != "policy" {
			full = path + "." + full
		}
		known := false
		for _, a := range allowed {
			known = known || a == key
		}
		if !known {
			return nil, policyError(full, nil, "unknown field; want one of "+strings.Join(allowed, ", "))
		}
		if _, dup := out[key]; dup {
			return nil, policyError(full, nil, "repeated field; want it once")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, syntaxError(err)
		}
		out[key] = v
	}
	return out, nil
}

// number decodes raw as a finite JSON number.
func number(field string, raw json.RawMessage) (float64, error) {
	var n json.Number
	s := bytes.TrimSpace(raw)
	if len(s) == 0 || s[0] == '"' || json.Unmarshal(s, &n) != nil {
		return 0, policyError(field, clip(raw), "a number")
	}
	v, err := n.Float64()
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, policyError(field, clip(raw), "a number")
	}
	return v, nil
}

func validContentType(s string) bool {
	base, _, _ := strings.Cut(s, ";")
	base = strings.TrimSpace(base)
	for _, t := range HeaderContentTypes {
		if strings.EqualFold(base, t) {
			return true
		}
	}
	return false
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// clip shortens a raw value for a one-line error message.
func clip(raw json.RawMessage) string {
	var b bytes.Buffer
	s := string(bytes.TrimSpace(raw))
	if json.Compact(&b, raw) == nil {
		s = b.String()
	}
	if r := []rune(s); len(r) > 40 {
		s = string(r[:37]) + "..."
	}
	return s
}

// safeKey returns a field name fit for a one-line message.
func safeKey(k string) string {
	for _, c := range k {
		if c < 0x20 || c == 0x7f || c == '"' || c == '\\' {
			return strconv.QuoteToASCII(k)
		}
	}
	return k
}

func syntaxError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return policyError("policy", nil, fmt.Sprintf("want valid JSON (%v at byte %d)", se, se.Offset))
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return policyError("policy", nil, "want a complete JSON object")
	}
	return policyError("policy", nil, fmt.Sprintf("want valid JSON (%v)", err))
}
