package engine

import "fmt"

// RecordKind tags a stored record. The values are part of the embedded
// store's on-disk format: never renumber them.
type RecordKind uint8

// The record kinds.
const (
	RecValue   RecordKind = 1 // kv value or counter (text)
	RecFixed   RecordKind = 2 // fixed window state
	RecSliding RecordKind = 3 // sliding window state
	RecLog     RecordKind = 4 // sliding log state
	RecGCRA    RecordKind = 5 // gcra state
	RecReceipt RecordKind = 6 // reservation receipt
	RecGate    RecordKind = 7 // concurrency gate leases
	RecPace    RecordKind = 8 // pacing log
	RecReplay  RecordKind = 9 // replay record of one step
)

// Record is one stored record of a partition.
type Record struct {
	Kind     RecordKind
	ExpireAt int64 // Unix ms; the record is absent at and after this instant
	Data     []byte
}

// Live reports whether the record exists at now.
func (r *Record) Live(now int64) bool { return r.ExpireAt > now }

// View is what a store lends the Executor: the records of one partition, as
// committed before the batch. Get may return an expired record; the Executor
// treats it as absent. The Record's Data must stay valid until the batch is
// committed or abandoned; the Executor never modifies it.
type View interface {
	Get(key string) (Record, bool)
}

// Write is one change the Executor asks the store to commit. Rec.Data points
// into the Executor's buffer: a store must copy it before the next Run.
type Write struct {
	Key    string
	Delete bool
	Rec    Record
}

// replayKey returns the key of the replay record of step step of op. The
// leading NUL keeps it apart from every user key (Validate rejects those).
func replayKey(dst []byte, op string, step int) []byte {
	dst = append(dst, 0, 'o', 'p', 0)
	dst = append(dst, op...)
	dst = append(dst, 0)
	return appendUint(dst, uint64(step))
}

func appendUint(dst []byte, v uint64) []byte {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(dst, buf[i:]...)
}

var recordNames = [...]string{RecValue: "value", RecFixed: "fixed window", RecSliding: "sliding window", RecLog: "log window", RecGCRA: "gcra window", RecReceipt: "receipt", RecGate: "gate", RecPace: "pace", RecReplay: "replay"}

// String names the kind for error messages.
func (k RecordKind) String() string {
	if int(k) < len(recordNames) && recordNames[k] != "" {
		return recordNames[k]
	}
	return fmt.Sprintf("record(%d)", uint8(k))
}
