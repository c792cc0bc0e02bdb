package algo

import (
	"encoding/binary"
	"fmt"
)

// Receipt records what a successful reservation charged to its refundable
// budgets, so that a refund can return exactly that, at most once.
type Receipt struct {
	Cost int64
	Keys []string // the refundable budgets' keys
}

// AppendBinary appends the encoding of r to dst.
func (r Receipt) AppendBinary(dst []byte) []byte {
	dst = AppendReceiptCost(dst, r.Cost)
	for _, k := range r.Keys {
		dst = AppendReceiptKey(dst, k)
	}
	return dst
}

// AppendReceiptCost starts a receipt's encoding; AppendReceiptKey then adds
// each key. Together they encode a Receipt without building one.
func AppendReceiptCost(dst []byte, cost int64) []byte {
	return le.AppendUint64(dst, uint64(cost))
}

// AppendReceiptKey appends one refundable key to a receipt's encoding.
func AppendReceiptKey(dst []byte, key string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

// DecodeReceipt decodes a receipt.
func DecodeReceipt(data []byte) (Receipt, error) {
	if len(data) < 8 {
		return Receipt{}, corrupt("receipt", len(data))
	}
	r := Receipt{Cost: int64(le.Uint64(data))}
	data = data[8:]
	for len(data) > 0 {
		n, w := binary.Uvarint(data)
		if w <= 0 || uint64(len(data)-w) < n {
			return Receipt{}, fmt.Errorf("%w: receipt key", ErrCorrupt)
		}
		r.Keys = append(r.Keys, string(data[w:w+int(n)]))
		data = data[w+int(n):]
	}
	if r.Cost < 1 {
		return Receipt{}, fmt.Errorf("%w: receipt cost %d", ErrCorrupt, r.Cost)
	}
	return r, nil
}
