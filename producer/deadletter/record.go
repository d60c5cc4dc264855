package deadletter

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strings"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/internal/deadletterpb"
	"github.com/rocketry-go/rocketry/producer"
)

// A record is stored in bucket "records" under its key (see key). Its value,
// in format 2 (written since records carry a checksum):
//
//	recordMagic (4 bytes) | CRC-32C of key and payload (uint32, little-endian) | payload
//	payload: a protobuf rocketry.deadletter.v1.Record, whose message holds the ID
//
// (proto/rocketry/deadletter/v1/record.proto: the fields of rocketry.v1's
// SpoolRecord, which wrote the records before.)
//
// A value of format 1 (before the checksum) is the payload alone; it starts
// with byte 0x0a (field 1, the message). Such a record is read, with only
// the checks it always had (it decodes, its ID is its key), from a store of
// format 1 only (a legacy store: it holds no value of format 2); Open seals
// a legacy store's records in place, so that it is one no more. In a store
// that holds a value of format 2, a value that is not is damage: damaged
// bytes in a record's marker would otherwise turn it into an unchecked one.
const (
	// MaxBodyBytes is the largest body a record may hold: 1 GiB. A
	// Producer given a store refuses a WithMaxBodyBytes above it (New).
	MaxBodyBytes = 1 << 30
	// MaxRecordBytes is the largest encoded record: the largest value bbolt
	// stores.
	MaxRecordBytes = bolt.MaxValueSize
	// maxPlainKey is the longest ID used as its own key; a longer one is
	// keyed by its SHA-256 (bbolt keys are at most 32 KiB).
	maxPlainKey = 1024
)

var bucketRecords = []byte("records")

// recordMagic starts a value of format 2. A value is read as format 2 when
// at least 3 of its first 4 bytes match recordMagic, so that no single
// damaged byte turns a checked record into an unchecked one of format 1
// (which starts with 0x0a, and then never matches more than 1 of them).
var recordMagic = [4]byte{0x00, 'R', 'K', 0x02}

const recordHeaderSize = len(recordMagic) + 4

// key is the key of message ID id: the ID itself, or, for an ID longer
// than maxPlainKey bytes, "sha256:" and the hex of its SHA-256 (decode checks
// that a record's ID maps to its key).
func key(id string) []byte {
	if len(id) <= maxPlainKey {
		return []byte(id)
	}
	sum := sha256.Sum256([]byte(id))
	return []byte("sha256:" + hex.EncodeToString(sum[:]))
}

// encode makes the value of d with its sequence seq, checking the limits.
func encode(d *producer.DeadLetter, seq uint64) ([]byte, error) {
	payload, err := encodePayload(d)
	if err != nil {
		return nil, err
	}
	return seal(key(d.Message.ID), withSequence(payload, seq)), nil
}

// withSequence is payload with its sequence field (7) set to seq: a
// scalar appended to an encoded message is read as its value (the last one
// wins), so the payload is encoded once, before the transaction that
// numbers it.
func withSequence(payload []byte, seq uint64) []byte {
	if seq == 0 {
		return payload
	}
	payload = protowire.AppendTag(payload, 7, protowire.VarintType)
	return protowire.AppendVarint(payload, seq)
}

// encodePayload is the encoded record of d without its sequence, checking
// the limits.
func encodePayload(d *producer.DeadLetter) ([]byte, error) {
	switch {
	case d == nil || d.Message == nil:
		return nil, fmt.Errorf("%w: dead letter has no message", producer.ErrInvalidMessage)
	case d.Message.ID == "":
		return nil, fmt.Errorf("%w: dead letter's message has no ID (a replay could not be deduplicated)", producer.ErrInvalidMessage)
	case len(d.Message.Body) > MaxBodyBytes:
		return nil, fmt.Errorf("%w: message %q: body is %d bytes, over the limit of %d", ErrTooLarge, d.Message.ID, len(d.Message.Body), MaxBodyBytes)
	}
	m := d.Message
	pb := toProto(d)
	if n := proto.Size(pb) + recordHeaderSize + 11; n > MaxRecordBytes { // 11: the sequence
		return nil, fmt.Errorf("%w: message %q: record is %d bytes, over the limit of %d", ErrTooLarge, m.ID, n, MaxRecordBytes)
	}
	payload, err := proto.Marshal(pb)
	if err != nil {
		return nil, fmt.Errorf("deadletter: message %q: %w", m.ID, err)
	}
	return payload, nil
}

// seal is the stored value of payload under key k: the format 2 header, then
// payload.
func seal(k, payload []byte) []byte {
	v := make([]byte, recordHeaderSize, recordHeaderSize+len(payload))
	copy(v, recordMagic[:])
	binary.LittleEndian.PutUint32(v[len(recordMagic):], recordSum(k, payload))
	return append(v, payload...)
}

// recordSum is the CRC-32C of a record's key and payload: a value moved
// under another key fails it too.
func recordSum(k, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(k, castagnoli), castagnoli, payload)
}

// isSealed says whether v is read as format 2 (see recordMagic).
func isSealed(v []byte) bool {
	if len(v) < len(recordMagic) {
		return len(v) > 0 && v[0] != 0x0a // too short for either: damaged
	}
	same := 0
	for i, b := range recordMagic {
		if v[i] == b {
			same++
		}
	}
	return same >= len(recordMagic)-1
}

// unseal checks the value v stored under k and returns its payload; format 1
// is returned as it is (unchecked is true) when legacy says the store holds
// format 1 only, and is damage otherwise.
func unseal(k, v []byte, legacy bool) (payload []byte, unchecked bool, err error) {
	if !isSealed(v) {
		if !legacy {
			return nil, false, errors.New("record has no checksum header, in a store whose records have one")
		}
		return v, true, nil
	}
	if len(v) < recordHeaderSize || !bytes.Equal(v[:len(recordMagic)], recordMagic[:]) {
		return nil, false, errors.New("record header is damaged")
	}
	payload = v[recordHeaderSize:]
	if got, want := recordSum(k, payload), binary.LittleEndian.Uint32(v[len(recordMagic):]); got != want {
		return nil, false, fmt.Errorf("record checksum mismatch (CRC-32C %08x, stored %08x)", got, want)
	}
	return payload, false, nil
}

// toProto is d's stored form; its slices and map are shared.
func toProto(d *producer.DeadLetter) *deadletterpb.Record {
	m := d.Message
	attempts := min(max(d.Attempts, math.MinInt32), math.MaxInt32)
	pb := &deadletterpb.Record{
		Message: &rocketryv1.Message{
			MessageId: m.ID, Topic: m.Topic, Tag: m.Tag, Keys: m.Keys, Properties: m.Properties,
			Body: m.Body, Transactional: m.Transactional, MessageGroup: m.MessageGroup,
		},
		Error:         strings.ToValidUTF8(d.Err, "\uFFFD"), // proto strings must be UTF-8
		Attempts:      int32(attempts),
		Code:          rocketryv1.Code(d.Code), // the same numbers (brokercode pins them)
		MaybeStoredAt: strings.ToValidUTF8(d.MaybeStoredAt, "\uFFFD"),
	}
	if !d.DeadLetteredAt.IsZero() {
		pb.DeadLetteredAt = timestamppb.New(d.DeadLetteredAt)
	}
	if !m.DeliveryTime.IsZero() {
		pb.Message.DeliveryTime = timestamppb.New(m.DeliveryTime)
	}
	return pb
}

// decode reads the value stored under k, checking its checksum (legacy: see
// unseal). Its error wraps ErrCorrupt and names the key: what could be read
// of the ID.
func decode(k, v []byte, legacy bool) (*producer.DeadLetter, error) {
	d, _, err := decodeSeq(k, v, legacy)
	return d, err
}

// decodeSeq is decode, with the record's sequence.
func decodeSeq(k, v []byte, legacy bool) (*producer.DeadLetter, uint64, error) {
	payload, _, err := unseal(k, v, legacy)
	if err != nil {
		return nil, 0, &RecordError{Key: string(k), Reason: err.Error()}
	}
	d, seq, err := decodePayload(payload)
	if err != nil {
		return nil, 0, &RecordError{Key: string(k), Reason: err.Error()}
	}
	if string(key(d.Message.ID)) != string(k) {
		return nil, 0, &RecordError{Key: string(k), Reason: fmt.Sprintf("the key holds message %q", d.Message.ID)}
	}
	return d, seq, nil
}

// decodeOld reads an encoded deadletterpb.Record (rocketry.v1's
// SpoolRecord before: the same fields), as stored here and in an old
// spool's record: it must decode, and hold a message with an ID.
func decodeOld(v []byte) (*producer.DeadLetter, error) {
	d, _, err := decodePayload(v)
	return d, err
}

// decodePayload is decodeOld, with the record's sequence.
func decodePayload(v []byte) (*producer.DeadLetter, uint64, error) {
	var pb deadletterpb.Record
	if err := proto.Unmarshal(v, &pb); err != nil {
		return nil, 0, fmt.Errorf("record does not decode: %v", err)
	}
	pm := pb.GetMessage()
	if pm.GetMessageId() == "" {
		return nil, 0, errors.New("record has no message ID")
	}
	d := &producer.DeadLetter{
		Message: &producer.Message{
			ID: pm.GetMessageId(), Topic: pm.GetTopic(), Tag: pm.GetTag(), Keys: pm.GetKeys(),
			Properties: pm.GetProperties(), Body: pm.GetBody(), Transactional: pm.GetTransactional(),
			MessageGroup: pm.GetMessageGroup(),
		},
		Err:           pb.GetError(),
		Attempts:      int(pb.GetAttempts()),
		Code:          brokercode.Code(pb.GetCode()),
		MaybeStoredAt: pb.GetMaybeStoredAt(),
	}
	if pm.DeliveryTime != nil {
		d.Message.DeliveryTime = pm.GetDeliveryTime().AsTime()
	}
	if pb.DeadLetteredAt != nil {
		d.DeadLetteredAt = pb.GetDeadLetteredAt().AsTime()
	}
	return d, pb.GetSequence(), nil
}

// merge is the record kept when d's ID is put again over old: d, with the
// first time the message was handed back, and old's endpoint when d has
// none (the message may still be stored there).
func merge(old, d *producer.DeadLetter) *producer.DeadLetter {
	m := *d
	if !old.DeadLetteredAt.IsZero() && (m.DeadLetteredAt.IsZero() || old.DeadLetteredAt.Before(m.DeadLetteredAt)) {
		m.DeadLetteredAt = old.DeadLetteredAt
	}
	if m.MaybeStoredAt == "" {
		m.MaybeStoredAt = old.MaybeStoredAt
	}
	return &m
}
