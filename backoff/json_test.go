package backoff

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePolicyDefaults(t *testing.T) {
	for _, in := range []string{`{}`, ` {"healthyRetryPolicy": {}} `, `{"healthyRetryPolicy": null, "sicklyRetryPolicy": null, "guaranteed": false}`} {
		p, err := ParsePolicy([]byte(in))
		if err != nil {
			t.Fatalf("ParsePolicy(%s) = %v", in, err)
		}
		if got, want := p.HealthyRetryPolicy(), DefaultHealthyRetryPolicy(); got != want {
			t.Errorf("ParsePolicy(%s) = %+v; want the defaults %+v", in, got, want)
		}
		if p.MaxReceivesPerSecond() != 0 || p.HeaderContentType() != "" {
			t.Errorf("ParsePolicy(%s): throttle %v, content type %q; want none", in, p.MaxReceivesPerSecond(), p.HeaderContentType())
		}
	}
}

func TestParsePolicyAccepts(t *testing.T) {
	tests := []struct {
		in   string
		want HealthyRetryPolicy
	}{
		{`{"healthyRetryPolicy":{"minDelayTarget":5,"maxDelayTarget":10,"numRetries":6,"backoffFunction":"EXPONENTIAL"},
		   "throttlePolicy":{"maxReceivesPerSecond":10},"requestPolicy":{"headerContentType":"application/json"}}`,
			HealthyRetryPolicy{MinDelayTarget: 5, MaxDelayTarget: 10, NumRetries: 6, BackoffFunction: Exponential}},
		{`{"healthyRetryPolicy":{"numRetries":0}}`, HealthyRetryPolicy{MinDelayTarget: 20, MaxDelayTarget: 20}},
		{`{"healthyRetryPolicy":{"numRetries":3.0,"numNoDelayRetries":3e0}}`,
			HealthyRetryPolicy{MinDelayTarget: 20, MaxDelayTarget: 20, NumRetries: 3, NumNoDelayRetries: 3}},
		{`{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":3600,"numRetries":1,"numMaxDelayRetries":1,"backoffFunction":"geometric"}}`,
			HealthyRetryPolicy{MinDelayTarget: 1, MaxDelayTarget: 3600, NumRetries: 1, NumMaxDelayRetries: 1, BackoffFunction: Geometric}},
	}
	for _, tt := range tests {
		p, err := ParsePolicy([]byte(tt.in))
		if err != nil {
			t.Errorf("ParsePolicy(%s) = %v", tt.in, err)
			continue
		}
		if got := p.HealthyRetryPolicy(); got != tt.want {
			t.Errorf("ParsePolicy(%s) = %+v; want %+v", tt.in, got, tt.want)
		}
	}
	p, _ := ParsePolicy([]byte(`{"requestPolicy":{"headerContentType":"text/plain; charset=UTF-8"}}`))
	if p == nil || p.HeaderContentType() != "text/plain; charset=UTF-8" {
		t.Errorf("headerContentType with charset not kept: %+v", p)
	}
}

func TestParsePolicyRefuses(t *testing.T) {
	hp := func(s string) string { return `{"healthyRetryPolicy":{` + s + `}}` }
	tests := []struct {
		name string
		in   string
		want []string // all in the error message
	}{
		{"min 0", hp(`"minDelayTarget":0`), []string{"healthyRetryPolicy.minDelayTarget", "= 0", "1..maxDelayTarget (20)"}},
		{"min above max", hp(`"minDelayTarget":30`), []string{"minDelayTarget", "30", "1..maxDelayTarget (20)"}},
		{"max too big", hp(`"maxDelayTarget":3601`), []string{"healthyRetryPolicy.maxDelayTarget", "3601", "..3600"}},
		{"retries 101", hp(`"numRetries":101,"minDelayTarget":1,"maxDelayTarget":1`), []string{"healthyRetryPolicy.numRetries", "101", "0..100"}},
		{"retries negative", hp(`"numRetries":-1`), []string{"numRetries", "-1", "0..100"}},
		{"retries huge", hp(`"numRetries":1e300`), []string{"healthyRetryPolicy.numRetries = 1e300", "0..100"}},
		{"count huge", hp(`"numNoDelayRetries":-12345678901234567890`), []string{"numNoDelayRetries = -12345678901234567890", ">= 0"}},
		{"fractional count", hp(`"numRetries":2.5`), []string{"healthyRetryPolicy.numRetries", "2.5", "integer"}},
		{"fractional delay", hp(`"minDelayTarget":1.5`), []string{"minDelayTarget", "1.5", "integer"}},
		{"string count", hp(`"numRetries":"3"`), []string{"healthyRetryPolicy.numRetries", `"3"`, "a number"}},
		{"bool count", hp(`"numNoDelayRetries":true`), []string{"numNoDelayRetries", "true", "a number"}},
		{"phases over total", hp(`"numRetries":3,"numNoDelayRetries":2,"numMinDelayRetries":2`), []string{"numNoDelayRetries+numMinDelayRetries+numMaxDelayRetries", "4", "<= numRetries (3)"}},
		{"negative phase", hp(`"numMaxDelayRetries":-2`), []string{"numMaxDelayRetries", "-2", ">= 0"}},
		{"unknown function", hp(`"backoffFunction":"cubic"`), []string{"healthyRetryPolicy.backoffFunction", `"cubic"`, "arithmetic, exponential, geometric, linear"}},
		{"function not a string", hp(`"backoffFunction":2`), []string{"backoffFunction", "2", "a string"}},
		{"typo", hp(`"numRetrys":5`), []string{"healthyRetryPolicy.numRetrys", "unknown field", "numRetries"}},
		{"wrong case", hp(`"NumRetries":5`), []string{"healthyRetryPolicy.NumRetries", "unknown field"}},
		{"duplicate", hp(`"numRetries":5,"numRetries":6`), []string{"healthyRetryPolicy.numRetries", "repeated field"}},
		{"unknown top", `{"healthyRetryPolicy":{},"retryPolicy":{}}`, []string{"retryPolicy", "unknown field"}},
		{"unknown throttle", `{"throttlePolicy":{"maxReceivesPerMinute":5}}`, []string{"throttlePolicy.maxReceivesPerMinute", "unknown field"}},
		{"unknown request", `{"requestPolicy":{"contentType":"text/plain"}}`, []string{"requestPolicy.contentType", "unknown field"}},
		{"throttle 0", `{"throttlePolicy":{"maxReceivesPerSecond":0}}`, []string{"throttlePolicy.maxReceivesPerSecond", "0", ">= 1"}},
		{"throttle string", `{"throttlePolicy":{"maxReceivesPerSecond":"10"}}`, []string{"throttlePolicy.maxReceivesPerSecond", "a number"}},
		{"content type", `{"requestPolicy":{"headerContentType":"text/html"}}`, []string{"requestPolicy.headerContentType", "text/html", "application/json"}},
		{"sickly", `{"sicklyRetryPolicy":{"numRetries":1}}`, []string{"sicklyRetryPolicy", "null"}},
		{"guaranteed", `{"guaranteed":true}`, []string{"guaranteed", "true", "false"}},
		{"healthy not an object", `{"healthyRetryPolicy":[1]}`, []string{"healthyRetryPolicy", "[1]", "a JSON object"}},
		{"top array", `[]`, []string{"policy", "a JSON object"}},
		{"top null", `null`, []string{"policy", "a JSON object"}},
		{"empty", ``, []string{"policy", "complete JSON"}},
		{"trailing", `{} {}`, []string{"policy", "nothing after it"}},
		{"trailing garbage", `{}x`, []string{"policy", "nothing after it"}},
		{"syntax", `{"healthyRetryPolicy":{"numRetries":}}`, []string{"policy", "valid JSON"}},
		{"total over an hour", hp(`"minDelayTarget":60,"maxDelayTarget":60,"numRetries":61`), []string{"total retry time", "3660s", "0..3600 seconds"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tt.in))
			if err == nil {
				t.Fatalf("ParsePolicy(%s) = %+v, nil; want an error", tt.in, p.HealthyRetryPolicy())
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("ParsePolicy(%s) = %v; want ErrInvalidPolicy", tt.in, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "backoff: ") || strings.Contains(msg, "\n") {
				t.Errorf("ParsePolicy(%s) = %q; want one line starting with \"backoff: \"", tt.in, msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("ParsePolicy(%s) = %q; want it to contain %q", tt.in, msg, w)
				}
			}
		})
	}
}
