package broker

import (
	"context"
	"fmt"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// QueryAssignment answers a PushConsumer's question of which queues of a
// topic it receives from, as the RocketMQ 5 proxy answers it
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/route/RouteActivity.java,
// queryAssignment): the topic and group validated, then one Assignment per
// broker of the topic's route that has a readable queue, its queue id -1
// (the proxy's pop names the broker, not a queue: ReceiveMessage reads
// every queue of the topic on that broker), its permission the queues'
// (READ_WRITE), its broker the leader (id 0) at the endpoints QueryRoute
// gives it (routeBrokers), and no accept_message_types. The proxy assigns
// each queue of a broker (ids 0..n-1) instead to a group configured to
// consume orderly; the broker has no group configuration, so every group
// gets the -1 queues.
//
// Refusals are statuses: 40002 ILLEGAL_TOPIC for a bad topic, as QueryRoute
// (checkRocketMQTopic); 40003 ILLEGAL_CONSUMER_GROUP for a missing or bad
// group, as the consumer calls (v2ConsumerTopic); 40402 TOPIC_NOT_FOUND for
// an unknown topic when the broker does not create topics, as QueryRoute;
// 40300 FORBIDDEN "no readable queue", the proxy's words, when no broker
// of the route has a readable queue (never with this broker's queues,
// which are all READ_WRITE). Like QueryRoute it creates no topic. The ACL
// checks the call's signature first (aclUnary in rocketmq_acl.go).
func (s rocketmqServer) QueryAssignment(ctx context.Context, req *rocketmqv2.QueryAssignmentRequest) (*rocketmqv2.QueryAssignmentResponse, error) {
	b := s.b
	refuse := func(code rocketmqv2.Code, msg string) (*rocketmqv2.QueryAssignmentResponse, error) {
		b.badRequests.Add(1)
		return &rocketmqv2.QueryAssignmentResponse{Status: v2Status(code, msg)}, nil
	}
	name := req.GetTopic().GetName()
	if r := checkRocketMQTopic(name); r != nil {
		return refuse(rocketmqv2.Code_ILLEGAL_TOPIC, r.msg)
	}
	if msg := checkName("group", req.GetGroup().GetName(), maxTopicLen); msg != "" {
		return refuse(rocketmqv2.Code_ILLEGAL_CONSUMER_GROUP, "broker: "+msg)
	}
	if !b.cfg.autoCreate && b.lookupTopic(name) == nil {
		return refuse(rocketmqv2.Code_TOPIC_NOT_FOUND,
			fmt.Sprintf("broker: topic %q not found (the broker does not create topics)", name))
	}
	topic := &rocketmqv2.Resource{ResourceNamespace: req.GetTopic().GetResourceNamespace(), Name: name}
	resp := &rocketmqv2.QueryAssignmentResponse{Status: v2OK()}
	if b.cfg.queues > 0 { // the proxy's PermName.isReadable(perm) && readQueueNums > 0
		for _, br := range b.routeBrokers(req.GetEndpoints()) {
			resp.Assignments = append(resp.Assignments, &rocketmqv2.Assignment{
				MessageQueue: &rocketmqv2.MessageQueue{
					Topic: topic, Id: -1, Permission: rocketmqv2.Permission_READ_WRITE, Broker: br,
				},
			})
		}
	}
	if len(resp.Assignments) == 0 {
		return &rocketmqv2.QueryAssignmentResponse{Status: v2Status(rocketmqv2.Code_FORBIDDEN, "no readable queue")}, nil
	}
	return resp, nil
}
