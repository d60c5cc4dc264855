package producer

// rmqSettings are the options of the apache.rocketmq.v2 protocol.
type rmqSettings struct{}
