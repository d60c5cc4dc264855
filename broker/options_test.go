package broker_test

import "github.com/rocketry-go/rocketry/broker"

func brokerQueues(n int) broker.Option { return broker.WithQueues(n) }
