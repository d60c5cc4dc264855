package producer

import "github.com/rocketry-go/rocketry/producer/internal/wire"

// transport is one wire protocol under a Producer (wire.Transport, whose
// doc says what each method does): the Producer holds one and never asks
// which. rocketry.v1's (producer/internal/wire/v1) sends to a host:port
// list, NewFromConn's connection or a resolved target; apache.rocketmq.v2's
// (producer/internal/wire/rocketmq) through a RocketMQ 5 proxy.
// What only RocketMQ 5 has (BeginTransaction, Recall) asserts the
// transport for wire.Transactions, and is ErrNotRocketMQ5 without it.
type transport = wire.Transport

// env is what a transport takes of p, made once in New.
func (p *Producer) env() wire.Env {
	return wire.Env{Cfg: &p.cfg.Config, Pacing: p.cfg.pacing, HardCtx: p.hardCtx}
}
