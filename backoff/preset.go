package backoff

import (
	"fmt"
	"strings"
)

// Preset names, as the schedule command takes them.
const (
	PresetAWSManaged      = "aws-managed"
	PresetCustomerManaged = "customer-managed"
)

// PresetNames lists the names Preset knows.
var PresetNames = []string{PresetAWSManaged, PresetCustomerManaged}

// AWSManaged returns SNS's delivery policy for AWS-managed endpoints
// (Lambda, SQS): 3 immediate retries, 2 at 1 s, 10 exponential from 1 s to
// 20 s, and 100,000 at 20 s: 100,015 retries over about 23 days. Like
// SNS's own, it is exempt from the 100-retry and 3,600 s limits of custom
// policies. It has DefaultPolicyJitter.
func AWSManaged() *DeliveryPolicy {
	return preset(PresetAWSManaged, HealthyRetryPolicy{
		MinDelayTarget: 1, MaxDelayTarget: 20, NumRetries: 100_015,
		NumNoDelayRetries: 3, NumMinDelayRetries: 2, NumMaxDelayRetries: 100_000,
		BackoffFunction: Exponential,
	})
}

// CustomerManaged returns SNS's delivery policy for customer-managed
// endpoints (SMTP, SMS, mobile push): no immediate retry, 2 at 10 s, 10
// exponential from 10 s to 600 s, and 38 at 600 s: 50 retries over about 6
// hours. Exempt from the limits of custom policies; DefaultPolicyJitter.
func CustomerManaged() *DeliveryPolicy {
	return preset(PresetCustomerManaged, HealthyRetryPolicy{
		MinDelayTarget: 10, MaxDelayTarget: 600, NumRetries: 50,
		NumNoDelayRetries: 0, NumMinDelayRetries: 2, NumMaxDelayRetries: 38,
		BackoffFunction: Exponential,
	})
}

// Preset returns the preset with the given name (see PresetNames). An
// unknown name gives an error wrapping ErrUnknownPreset that lists the
// known ones.
func Preset(name string) (*DeliveryPolicy, error) {
	switch name {
	case PresetAWSManaged:
		return AWSManaged(), nil
	case PresetCustomerManaged:
		return CustomerManaged(), nil
	}
	return nil, fmt.Errorf("%w %q: want one of %s", ErrUnknownPreset, name, strings.Join(PresetNames, ", "))
}

func preset(name string, h HealthyRetryPolicy) *DeliveryPolicy {
	if err := h.validate(false); err != nil {
		panic(err) // a bug in the table above
	}
	return &DeliveryPolicy{h: h, jitter: DefaultPolicyJitter, name: name}
}
