package wirermq

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/message"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// This file holds what a RocketMQ 5 client says about itself and its
// messages: its client ID, its message IDs, and the conversion of a Message
// to its v2 wire form.

// rmqIDEpoch is the epoch of the seconds in a v1 message ID.
var rmqIDEpoch = time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)

// rmqIDGen makes message IDs in the RocketMQ 5 "v1" format the official
// clients use: 34 upper-case hex digits,
//
//	01 | 6 bytes: a MAC address | 2 bytes: low bits of the pid |
//	4 bytes: seconds since 2021-01-01 UTC | 4 bytes: a sequence number
//
// so that a proxy or a tool that decodes IDs reads ours too. It is safe
// for concurrent use. The clients of a process share one (rmqIDs), as the
// official clients share theirs (the Java client's MessageIdCodec is a
// singleton): their prefix is the same, so that IDs of two clients with
// sequences of their own would collide, and a proxy stores a message's ID
// as it is sent.
type rmqIDGen struct {
	prefix string // "01" + MAC + pid, upper-case hex
	seq    atomic.Uint32
	now    func() time.Time
}

// rmqIDs makes the message IDs of every client of the process.
var rmqIDs = newRMQIDGen()

func newRMQIDGen() *rmqIDGen {
	var b [8]byte
	if mac := firstMAC(); len(mac) >= 6 {
		copy(b[:6], mac)
	} else {
		_, _ = rand.Read(b[:6]) // crypto/rand.Read never fails (Go 1.24+)
	}
	binary.BigEndian.PutUint16(b[6:], uint16(os.Getpid()))
	return &rmqIDGen{prefix: "01" + strings.ToUpper(hex.EncodeToString(b[:])), now: time.Now}
}

// firstMAC returns the hardware address of the first interface that has
// one, or nil.
func firstMAC() net.HardwareAddr {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for _, i := range ifs {
		if len(i.HardwareAddr) >= 6 {
			return i.HardwareAddr
		}
	}
	return nil
}

func (g *rmqIDGen) next() string {
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], uint32(g.now().Unix()-rmqIDEpoch.Unix()))
	binary.BigEndian.PutUint32(b[4:], g.seq.Add(1)-1)
	return g.prefix + strings.ToUpper(hex.EncodeToString(b[:]))
}

// rmqClientIndex numbers the clients of this process, as in the client IDs
// of the official clients.
var rmqClientIndex atomic.Int64

// newRMQClientID returns a client ID as the official clients make them:
// host@pid@index@start, the start time in microseconds in base 36. A proxy
// keys a client's settings and heartbeats by it.
func newRMQClientID(now time.Time) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s@%d@%d@%s", host, os.Getpid(), rmqClientIndex.Add(1)-1,
		strconv.FormatInt(now.UnixMicro(), 36))
}

// rmqBodyDigest is the body's CRC32 (IEEE) as the Java client writes it:
// upper-case hex without leading zeros.
func rmqBodyDigest(body []byte) *rocketmqv2.Digest {
	return &rocketmqv2.Digest{
		Type:     rocketmqv2.DigestType_CRC32,
		Checksum: strings.ToUpper(strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 16)),
	}
}

// toRMQ converts m, which has its ID, to a v2 message of the given
// namespace; its type follows from it as in the official clients (FIFO with
// a message group, DELAY with a delivery time). The queue is chosen per attempt (SystemProperties.QueueId).
// Keys, properties and body are shared, not copied.
func toRMQ(m *message.Message, namespace, bornHost string, now time.Time) *rocketmqv2.Message {
	typ := rocketmqv2.MessageType_NORMAL
	switch { // exclusive: validateType
	case m.Transactional:
		typ = rocketmqv2.MessageType_TRANSACTION
	case m.MessageGroup != "":
		typ = rocketmqv2.MessageType_FIFO
	case !m.DeliveryTime.IsZero():
		typ = rocketmqv2.MessageType_DELAY
	}
	sp := &rocketmqv2.SystemProperties{
		Keys:          m.Keys,
		MessageId:     m.ID,
		BodyDigest:    rmqBodyDigest(m.Body),
		BodyEncoding:  rocketmqv2.Encoding_IDENTITY,
		MessageType:   typ,
		BornTimestamp: timestamppb.New(now),
		BornHost:      bornHost,
	}
	if m.Tag != "" {
		sp.Tag = &m.Tag
	}
	if m.MessageGroup != "" {
		sp.MessageGroup = &m.MessageGroup
	}
	if !m.DeliveryTime.IsZero() {
		sp.DeliveryTimestamp = timestamppb.New(m.DeliveryTime)
	}
	if tc, ok := m.Properties[traceParentProperty]; ok {
		sp.TraceContext = &tc
	}
	return &rocketmqv2.Message{
		Topic:            &rocketmqv2.Resource{ResourceNamespace: namespace, Name: m.Topic},
		UserProperties:   m.Properties,
		SystemProperties: sp,
		Body:             m.Body,
	}
}

// traceParentProperty is producer.TraceParentProperty: a message with it
// also carries its value in the trace_context of its SystemProperties,
// where RocketMQ 5 looks for it.
const traceParentProperty = "traceparent"

// rmqBornHost is the born_host of this process's messages: the first
// non-loopback IPv4 address, else the host name.
func rmqBornHost() string {
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
				return ip.IP.String()
			}
		}
	}
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "localhost"
}
