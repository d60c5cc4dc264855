// Package deadletter is a durable dead-letter store for rocketry producers:
// the messages a Producer could not send, kept on local disk until a replay
// sends them again.
//
// A Store is one file, a bbolt database (go.etcd.io/bbolt): every Put is an
// fsync'd transaction, so a crash leaves the store as it was before or after
// it, never a torn record; one record per message ID; one process at a time,
// by a lock on the file that a second Open waits for, then refuses with
// ErrLocked. It implements producer.DeadLetterSink:
//
//	store, err := deadletter.Open("/var/lib/app/dead.db")
//	...
//	p, err := producer.New(addr, producer.WithDeadLetterSink(store))
//	...
//	p.Close(ctx)
//	store.Close() // after the producer: Close waits for every Put
//
// A record keeps, beside the message and its last error, the endpoint of
// the last attempt whose outcome was unknown (DeadLetter.MaybeStoredAt): the
// message may be stored there. Replay resends each record with a Producer's
// Resend, which sends such a record to that endpoint and no other, so that
// replaying to several brokers stores nothing twice; it deletes each record
// as soon as it is stored, before the next is sent (a crash sends again at
// most the one record in flight), stops early when the broker keeps
// throttling (ReplayOptions.MaxThrottled), and a later Replay takes up what
// is left.
//
// A damaged file never crashes, hangs, or changes a message. Open reads
// every page in use before bbolt does and refuses a store whose pages are
// not sound with ErrCorrupt, naming what is wrong; each record carries a
// CRC-32C, checked on every read, and one that fails is never sent (it
// stays, reported by its key); Check says what is intact and what is not,
// and Salvage copies every intact record into a new store. Replay keeps a
// small ledger of what it delivered, FILE.delivered, so that records that
// come back when bbolt falls back to an older meta page are not sent again.
//
// The command line looks inside a store without sending anything
// (`rocketry spool ls|show|stats FILE`), checks and salvages a damaged one
// (`rocketry spool check FILE`, `rocketry spool salvage FILE NEW`) and
// replays it (`rocketry replay --spool FILE --addr ...`). A spool file of the format that
// producer.WithSpool wrote before this package is refused by Open with
// ErrOldSpool; Store.ImportSpool (or `rocketry spool import OLD FILE`)
// puts its records into a store.
package deadletter
