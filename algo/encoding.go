package algo

import (
	"encoding/binary"
	"fmt"
)

// The encodings below are fixed-width little-endian integers. They are part
// of the embedded store's on-disk format: change them only together with a
// new record kind.

var le = binary.LittleEndian

// AppendBinary appends the encoding of s as a window of kind k to dst.
func (s WindowState) AppendBinary(k Kind, dst []byte) []byte {
	switch k {
	case KindFixed:
		dst = le.AppendUint64(dst, uint64(s.Start))
		return le.AppendUint64(dst, uint64(s.Count))
	case KindSliding:
		dst = le.AppendUint64(dst, uint64(s.Start))
		dst = le.AppendUint64(dst, uint64(s.Count))
		return le.AppendUint64(dst, uint64(s.Prev))
	case KindGCRA:
		dst = le.AppendUint64(dst, uint64(s.TAT))
		return le.AppendUint64(dst, uint64(s.Frac))
	case KindLog:
		return appendEntries(dst, s.Log)
	}
	return dst
}

// DecodeWindow decodes a window state of kind k. An empty input is the empty
// state. A log state's entries are a fresh slice.
func DecodeWindow(k Kind, data []byte) (WindowState, error) {
	if len(data) == 0 {
		return WindowState{}, nil
	}
	var s WindowState
	switch k {
	case KindFixed:
		if len(data) != 16 {
			return s, corrupt("fixed window", len(data))
		}
		s.Start, s.Count = int64(le.Uint64(data)), int64(le.Uint64(data[8:]))
	case KindSliding:
		if len(data) != 24 {
			return s, corrupt("sliding window", len(data))
		}
		s.Start, s.Count, s.Prev = int64(le.Uint64(data)), int64(le.Uint64(data[8:])), int64(le.Uint64(data[16:]))
	case KindGCRA:
		if len(data) != 16 {
			return s, corrupt("gcra window", len(data))
		}
		s.TAT, s.Frac = int64(le.Uint64(data)), int64(le.Uint64(data[8:]))
		if s.Frac < 0 || s.Frac >= MaxLimit {
			return s, fmt.Errorf("%w: gcra fraction %d", ErrCorrupt, s.Frac)
		}
	case KindLog:
		entries, err := decodeEntries(data)
		if err != nil {
			return s, err
		}
		s.Log = entries
	default:
		return s, fmt.Errorf("%w: window kind %d", ErrCorrupt, k)
	}
	if s.Count < 0 || s.Count > MaxLimit || s.Prev < 0 || s.Prev > MaxLimit {
		return s, fmt.Errorf("%w: count outside 0…%d", ErrCorrupt, MaxLimit)
	}
	return s, nil
}

func appendEntries(dst []byte, entries []Entry) []byte {
	for _, e := range entries {
		dst = le.AppendUint64(dst, uint64(e.At))
		dst = le.AppendUint64(dst, uint64(e.N))
	}
	return dst
}

func decodeEntries(data []byte) ([]Entry, error) {
	if len(data)%16 != 0 {
		return nil, corrupt("log", len(data))
	}
	entries := make([]Entry, len(data)/16)
	for i := range entries {
		entries[i] = Entry{At: int64(le.Uint64(data[16*i:])), N: int64(le.Uint64(data[16*i+8:]))}
		if entries[i].N < 1 || entries[i].N > MaxLimit || (i > 0 && entries[i].At <= entries[i-1].At) {
			return nil, fmt.Errorf("%w: log entry %d out of order or outside 1…%d", ErrCorrupt, i, MaxLimit)
		}
	}
	return entries, nil
}

func corrupt(what string, n int) error {
	return fmt.Errorf("%w: %s state of %d bytes", ErrCorrupt, what, n)
}
