package kit

import (
	"sync"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Acks keeps the status of each AckMessage answer by receipt handle, since
// the client's Ack does not return it. Its zero value is ready; it is safe
// for concurrent use.
type Acks struct {
	mu    sync.Mutex
	codes map[string]*v2.Status
}

// Record records the answer to req when req is an AckMessageRequest that
// was answered (err nil): per entry, the entry's status when it is not OK,
// else the answer's.
func (a *Acks) Record(req, reply any, err error) {
	q, ok := req.(*v2.AckMessageRequest)
	if !ok || err != nil {
		return
	}
	resp, _ := reply.(*v2.AckMessageResponse)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.codes == nil {
		a.codes = map[string]*v2.Status{}
	}
	for _, e := range q.GetEntries() {
		st := resp.GetStatus()
		for _, re := range resp.GetEntries() {
			if re.GetReceiptHandle() == e.GetReceiptHandle() && re.GetStatus().GetCode() != v2.Code_OK {
				st = re.GetStatus()
			}
		}
		a.codes[e.GetReceiptHandle()] = st
	}
}

// Take returns and forgets the status of the acknowledgement of handle;
// nil (code 0) when none was answered.
func (a *Acks) Take(handle string) *v2.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.codes[handle]
	delete(a.codes, handle)
	return st
}

// Intercept wraps the client's NewRpcClient so that every connection
// carries interceptor and no per-call log file.
func Intercept(interceptor grpc.UnaryClientInterceptor) {
	newRPCClient := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		return newRPCClient(target, append(opts, rmq.WithRpcClientConnOption(
			rmq.WithZapLogger(zap.NewNop()),
			rmq.WithDialOptions(grpc.WithChainUnaryInterceptor(interceptor)),
		))...)
	}
}
