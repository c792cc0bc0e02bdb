package diskstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/engine"
)

// Every change reaches Pebble first as one journal row per commit, and as
// the rows it changes (records, index entries, replay records) only later,
// in a checkpoint.
//
// A window hit rewrites its record's row. Written to Pebble as it is, every
// hit inserts a new version of that row into the memtable's skiplist, a
// search from the top of a list of hundreds of thousands of entries at a
// random place in it: that insertion was the largest cost of a hit. A
// journal row instead is one entry per commit, under a key that follows
// every earlier one, so its insertion follows the same path down the list
// each time; and a checkpoint writes each changed row once, however often
// it changed since the last, in key order, which Pebble inserts cheaply.
//
// The journal row is in the commit's Pebble batch, so it is in the
// write-ahead log, fsynced, exactly when the rows themselves used to be:
// what an answer rests on is unchanged. Until a checkpoint has written a
// partition's rows, the partition keeps them in memory (partition.pend)
// and stays resident: a partition is only ever read from its rows once
// they are current. A checkpoint writes the rows and deletes the journal
// rows they cover in one Pebble batch, which the log keeps or loses whole;
// opening a store applies whatever journal rows a crash left, in order.
//
// Journal rows are numbered in commit order per partition: a commit takes
// its number under its partitions' locks, after marking them dirty (see
// markDirty). A checkpoint first reads the last number handed out, then
// takes the dirty partitions: every commit numbered up to that point has
// marked its partitions dirty by then, so the checkpoint writes its rows,
// and may delete its journal row.

// Journal op codes: a journal row's value is a sequence of ops, each
//
//	opSet       uvarint(len(key)) key uvarint(len(value)) value
//	opDelete    uvarint(len(key)) key
//	opSetRecord uvarint(len(k)) k uvarint(len(value)) value
//
// applied in order to the rows, keys being Pebble keys (see layout.go),
// but for opSetRecord's: it sets record k of the partition named by the
// key of the last opSet or opDelete of a record row before it. A round
// writes its partition's records one after another, so every record op
// after the first spares the partition's name: over the server, where
// names are 64-digit hashes, a request of 4 steps of 8 hits wrote 193–196
// bytes of log per decision instead of 254–258.
// The ops of each partition in a row begin with a full record op before
// any opSetRecord, so that a partition's ops are read alone (a
// partition's pending ops, see pendingOps) as well as in their row.
const (
	opSet       = 's'
	opDelete    = 'd'
	opSetRecord = 'r'
)

// checkpointBytes is how much a store keeps pending in memory before it
// checkpoints ahead of its sweep.
const checkpointBytes = 64 << 20

func appendSetOp(dst, key, value []byte) []byte {
	dst = binary.AppendUvarint(append(dst, opSet), uint64(len(key)))
	dst = binary.AppendUvarint(append(dst, key...), uint64(len(value)))
	return append(dst, value...)
}

// appendSetRecordOp appends an opSetRecord of record k.
func appendSetRecordOp(dst []byte, k string, value []byte) []byte {
	dst = binary.AppendUvarint(append(dst, opSetRecord), uint64(len(k)))
	dst = binary.AppendUvarint(append(dst, k...), uint64(len(value)))
	return append(dst, value...)
}

func appendDeleteOp(dst, key []byte) []byte {
	dst = binary.AppendUvarint(append(dst, opDelete), uint64(len(key)))
	return append(dst, key...)
}

// nextOp decodes the first op of ops; key and value alias ops.
func nextOp(ops []byte) (op byte, key, value, rest []byte, err error) {
	corrupt := func() (byte, []byte, []byte, []byte, error) {
		return 0, nil, nil, nil, fmt.Errorf("%w: journal op of %d bytes", engine.ErrCorrupt, len(ops))
	}
	if len(ops) == 0 {
		return corrupt()
	}
	op, rest = ops[0], ops[1:]
	field := func() ([]byte, bool) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return nil, false
		}
		f := rest[w : w+int(n)]
		rest = rest[w+int(n):]
		return f, true
	}
	var ok bool
	if key, ok = field(); !ok {
		return corrupt()
	}
	switch op {
	case opSet, opSetRecord:
		if value, ok = field(); !ok {
			return corrupt()
		}
	case opDelete:
	default:
		return corrupt()
	}
	return op, key, value, rest, nil
}

// markDirty records that p is about to commit changes its rows do not yet
// hold. The caller holds p.mu, and numbers its journal row after this.
func (s *Store) markDirty(p *partition) {
	if p.dirty.Load() {
		return
	}
	p.dirty.Store(true)
	s.dmu.Lock()
	s.dirty = append(s.dirty, p)
	if p.pend.ops == nil {
		p.pend.reset(s.spareOps.take())
	}
	s.dmu.Unlock()
}

// journalRow adds ops to pb as the next journal row, its key built in jk,
// which it returns. The caller holds the locks of every partition ops
// changes, each marked dirty unless pb also writes the rows themselves
// (the sweep).
func (s *Store) journalRow(pb *pebble.Batch, jk, ops []byte) []byte {
	jk = appendJournalKey(jk[:0], s.jseq.Add(1))
	_ = pb.Set(jk, ops, nil)
	return jk
}

// pending adds ops, just committed, to what p holds for its next
// checkpoint. The caller holds p.mu.
func (s *Store) pending(p *partition, ops []byte) {
	p.pend.ops = append(p.pend.ops, ops...)
	if s.pendBytes.Add(int64(len(ops))) > checkpointBytes && len(s.ckptSoon) == 0 {
		select {
		case s.ckptSoon <- struct{}{}:
		default:
		}
	}
}

// pendingOps holds journal ops a partition has committed and a
// checkpoint has not yet written (partition.pend and flushing), with an
// index of the replay rows they set. Resetting the ops resets the index.
type pendingOps struct {
	ops []byte
	// replays maps the fingerprint (replayPrint) of the Pebble key of
	// each replay row that ops[:indexed] sets to the offset of the last op
	// setting it. Lookups build it (see findReplay), so a commit
	// pays nothing for it, and a retry on a busy partition reads each op
	// once, however many retries come, rather than every op each time.
	replays map[uint64]int
	indexed int
}

// maxKeptIndex bounds the index a partition keeps for its next ops.
const maxKeptIndex = 1024

// reset makes buf the ops held, buf being empty or nil, and empties the
// index; it keeps the index's map unless a burst of retries grew it.
func (o *pendingOps) reset(buf []byte) {
	o.ops, o.indexed = buf, 0
	if len(o.replays) > maxKeptIndex {
		o.replays = nil
	}
	clear(o.replays)
}

// findReplay returns the value of the last op in o that sets the replay
// row rk, in whatever slice of rk's bucket (see sameReplay). It first
// indexes the ops committed since the last lookup.
func (o *pendingOps) findReplay(rk []byte, seed maphash.Seed) ([]byte, bool, error) {
	for o.indexed < len(o.ops) {
		op, k, _, rest, err := nextOp(o.ops[o.indexed:])
		if err != nil {
			return nil, false, err
		}
		if op == opSet && len(k) >= replayHead && k[0] == nsReplay {
			if o.replays == nil {
				o.replays = make(map[uint64]int)
			}
			o.replays[replayPrint(seed, k)] = o.indexed
		}
		o.indexed = len(o.ops) - len(rest)
	}
	at, ok := o.replays[replayPrint(seed, rk)]
	if !ok {
		return nil, false, nil
	}
	if _, k, v, _, err := nextOp(o.ops[at:]); err != nil || sameReplay(k, rk) {
		return v, err == nil, err
	}
	// Another replay row's key shares rk's fingerprint (64 bits, seeded:
	// never seen in practice), and was set later: read every op.
	return scanReplay(o.ops, rk)
}

// scanReplay returns the value of the last op in ops that sets rk, in
// whatever slice of rk's bucket.
func scanReplay(ops, rk []byte) ([]byte, bool, error) {
	var found []byte
	ok := false
	for len(ops) > 0 {
		op, k, v, rest, err := nextOp(ops)
		if err != nil {
			return nil, false, err
		}
		if op == opSet && sameReplay(k, rk) {
			found, ok = v, true
		}
		ops = rest
	}
	return found, ok, nil
}

// pendingReplay returns the value of the replay row rk (in whatever slice
// of its bucket) among the rows p holds for a checkpoint, the latest if
// several set it; the value aliases p's buffers. The caller holds p.mu.
func pendingReplay(p *partition, rk []byte, seed maphash.Seed) ([]byte, bool, error) {
	for _, o := range [2]*pendingOps{&p.pend, &p.flushing} { // newest first
		if v, ok, err := o.findReplay(rk, seed); err != nil || ok {
			return v, ok, err
		}
	}
	return nil, false, nil
}

// ckptRow is one row a checkpoint writes: its key is buf[k:v] and its
// value buf[v:end] of the checkpoint's buffer (offsets, so that the
// buffer may grow while rows are added).
type ckptRow struct {
	k, v, end int
	del       bool
}

// checkpoint writes the rows of every dirty partition and deletes the
// journal rows they cover, in one Pebble batch that asks for no fsync: if
// a crash loses it, the journal rows it deleted are still there. A record
// row is written as the partition holds the record now (or deleted, if it
// holds none), once however many times it changed; index entries as they
// were committed; replay records unless their bucket has ended at now (the
// sweep deletes such buckets whole).
func (s *Store) checkpoint(now int64) error {
	s.ckmu.Lock()
	defer s.ckmu.Unlock()
	if err := s.failure(); err != nil {
		return err
	}
	last := s.jseq.Load()
	s.dmu.Lock()
	if last == s.ckptTo && len(s.dirty) == 0 {
		// Nothing to write. Left untaken, s.dirty keeps a buffer of its
		// own: dropped here, it would share dirtySpare's, and the next
		// checkpoint's list be overwritten by the partitions committed
		// during it. The load has stopped: the spares it needed go.
		s.spareOps.limit(minSpareOps)
		s.dmu.Unlock()
		return nil
	}
	parts := s.dirty
	s.dirty = s.dirtySpare[:0]
	s.dmu.Unlock()
	ck := &s.ckpt
	ck.buf, ck.rows = ck.buf[:0], ck.rows[:0]
	ended := lastEnded(now)
	var taken int64
	for _, p := range parts {
		p.mu.Lock()
		p.flushing, p.pend = p.pend, p.flushing
		p.pend.reset(p.pend.ops[:0])
		taken += int64(len(p.flushing.ops))
		err := s.checkpointRows(ck, p, p.flushing.ops, ended)
		p.mu.Unlock()
		if err != nil {
			return s.failIn("checkpoint", err)
		}
	}
	pb := ck.takeBatch(s.db)
	defer func() {
		if pb != nil {
			_ = pb.Close()
		}
	}()
	ck.write(pb)
	_ = pb.DeleteRange([]byte{nsJournal}, appendJournalKey(nil, last+1), nil)
	if err := s.failure(); err != nil {
		return err
	}
	if err := s.db.Apply(pb, pebble.NoSync); err != nil {
		// The partitions' rows are not written and their pending rows are
		// gone from memory: a later checkpoint would delete journal rows
		// whose changes no row holds. Stop, as after a failed fsync.
		return s.failIn("checkpoint", err)
	}
	s.ckptTo = last
	s.pendBytes.Add(-taken)
	if keepCkptBuf(cap(ck.buf), len(ck.buf)) {
		pb.Reset()
		ck.batch, pb = pb, nil
	} else {
		*ck = ckptBuf{}
	}
	keep, freed := parts[:0], ck.freed[:0]
	for _, p := range parts {
		p.mu.Lock()
		if len(p.pend.ops) == 0 {
			// Clean, p holds no buffer: only a partition written since
			// the last checkpoint does. Its buffers may serve the next
			// partition to turn dirty.
			p.dirty.Store(false)
			freed = append(freed, p.pend.ops, p.flushing.ops)
			p.pend, p.flushing = pendingOps{}, pendingOps{}
		} else {
			keep = append(keep, p) // committed again meanwhile
			if cap(p.flushing.ops) > maxKeptPend {
				p.flushing.reset(nil)
			} else {
				p.flushing.reset(p.flushing.ops[:0])
			}
		}
		p.mu.Unlock()
	}
	clear(parts[len(keep):])
	s.dmu.Lock()
	meanwhile := s.dirty
	s.dirty = append(keep, meanwhile...)
	clear(meanwhile)
	s.dirtySpare = meanwhile[:0]
	// Spares for as many buffers as this checkpoint's partitions filled:
	// under a steady load most partitions are left clean by one
	// checkpoint and turn dirty again before the next, and without a
	// spare each would grow a buffer afresh.
	s.spareOps.limit(max(minSpareOps, spareOpsPerByte*int(taken)))
	for _, b := range freed {
		s.spareOps.give(b)
	}
	s.dmu.Unlock()
	clear(freed)
	ck.freed = freed[:0]
	return nil
}

// maxKeptCkpt bounds the buffer a store keeps between checkpoints once
// the load that grew it has passed.
const maxKeptCkpt = 4 << 20

// keepCkptBuf reports whether a checkpoint keeps its buffer, of capacity
// c, for the next after using n bytes of it: up to maxKeptCkpt always;
// past it, only while the checkpoint used at least half of it. A steady
// load keeps its buffer, however large (checkpointBytes bounds it), rather
// than growing it afresh every checkpoint; a burst's is let go at the
// first checkpoint after it.
func keepCkptBuf(c, n int) bool { return c <= maxKeptCkpt || c <= 2*n }

// The spare buffers of journal ops a store keeps (spareBufs) hold at most
// spareOpsPerByte times the bytes of ops the last checkpoint wrote, or
// minSpareOps if that is more: enough for the partitions it left clean
// (each with the two buffers it fills and writes from in turn, grown past
// what they hold) to turn dirty again with a buffer each while the load
// lasts. A checkpoint with less to write lets the surplus go. A checkpoint
// is asked for once checkpointBytes of ops are pending, so the spares stay
// near spareOpsPerByte × checkpointBytes at most.
const (
	minSpareOps     = 4 << 20
	spareOpsPerByte = 2
)

// minSpareOp is the smallest buffer worth keeping as a spare: a smaller
// one saves a caller hardly more than one small allocation, and a stack of
// them would cost more in its own entries than in their bytes.
const minSpareOp = 256

// spareBufs is a bounded stack of empty buffers of journal ops.
type spareBufs struct {
	bufs  [][]byte
	bytes int // their capacities' sum, at most bound
	bound int // set by limit (0 until it is first set: nothing kept)
}

// limit bounds the spares' bytes to n, letting buffers go to keep to it.
func (sb *spareBufs) limit(n int) {
	sb.bound = n
	for sb.bytes > n {
		sb.take()
	}
}

// give keeps b, emptied, if it has room for b's capacity; a buffer under
// minSpareOp, or over maxKeptPend (a burst's), is let go.
func (sb *spareBufs) give(b []byte) {
	if c := cap(b); c >= minSpareOp && c <= maxKeptPend && sb.bytes+c <= sb.bound {
		sb.bufs = append(sb.bufs, b[:0])
		sb.bytes += c
	}
}

// take returns a spare buffer, or nil if none is left.
func (sb *spareBufs) take() []byte {
	n := len(sb.bufs)
	if n == 0 {
		return nil
	}
	b := sb.bufs[n-1]
	sb.bufs[n-1] = nil
	sb.bufs = sb.bufs[:n-1]
	sb.bytes -= cap(b)
	return b
}

// maxKeptPend bounds the buffer a partition committed to during a
// checkpoint keeps for its next.
const maxKeptPend = 64 << 10

// ckptBuf gathers a checkpoint's rows.
type ckptBuf struct {
	buf  []byte
	rows []ckptRow
	seen map[string]struct{} // the record rows of one partition added
	// freed holds the buffers of journal ops a checkpoint takes back from
	// partitions it leaves clean, on their way to the spare buffers.
	freed [][]byte
	// batch is the Pebble batch of the last checkpoint, emptied. A new
	// batch each time grew by doubling to the size of buf, every doubling
	// a fresh allocation to fault in and copy into: in a profile of the
	// server at 32 decisions per call, checkpoints took 7.2 % of the
	// process's CPU with a new batch each, 4.6 % reusing one.
	batch *pebble.Batch
	// scratch holds a record's value on its way into buf; prefix, the
	// partition prefix of the partition whose ops are read; rk, the key
	// of an opSetRecord's row.
	scratch, prefix, rk []byte
}

func (ck *ckptBuf) add(key, value []byte, del bool) {
	k := len(ck.buf)
	ck.buf = append(ck.buf, key...)
	v := len(ck.buf)
	ck.buf = append(ck.buf, value...)
	ck.rows = append(ck.rows, ckptRow{k: k, v: v, end: len(ck.buf), del: del})
}

// takeBatch returns the batch to write ck's rows in: the last
// checkpoint's, kept while ck.buf is (see keepCkptBuf), or a new one of
// the size the rows need.
func (ck *ckptBuf) takeBatch(db *pebble.DB) *pebble.Batch {
	if pb := ck.batch; pb != nil {
		ck.batch = nil
		return pb
	}
	// A row costs its kind, two lengths and its sequence in the batch's
	// encoding; the range deletion and the header, a few dozen bytes.
	size := len(ck.buf) + len(ck.rows)*(1+2*binary.MaxVarintLen32) + 64
	// Kept or let go by the checkpoint, not by Pebble's own bound.
	return db.NewBatchWithSize(size, pebble.WithMaxRetainedSizeBytes(math.MaxInt))
}

// write adds ck's rows to pb in key order, which Pebble inserts into its
// memtable cheaply.
func (ck *ckptBuf) write(pb *pebble.Batch) {
	slices.SortFunc(ck.rows, func(a, b ckptRow) int { return bytes.Compare(ck.key(a), ck.key(b)) })
	for _, r := range ck.rows {
		if r.del {
			_ = pb.Delete(ck.key(r), nil)
		} else {
			_ = pb.Set(ck.key(r), ck.value(r), nil)
		}
	}
}

func (ck *ckptBuf) key(r ckptRow) []byte   { return ck.buf[r.k:r.v] }
func (ck *ckptBuf) value(r ckptRow) []byte { return ck.buf[r.v:r.end] }

// checkpointRows adds to ck the rows of ops, p's journal ops. The caller
// holds p.mu.
func (s *Store) checkpointRows(ck *ckptBuf, p *partition, ops []byte, ended int64) error {
	if ck.seen == nil {
		ck.seen = make(map[string]struct{})
	}
	clear(ck.seen)
	ck.prefix = appendPartitionPrefix(ck.prefix[:0], p.name)
	prefix := len(ck.prefix)
	for len(ops) > 0 {
		op, k, v, rest, err := nextOp(ops)
		if err != nil {
			return err
		}
		ops = rest
		rk := k // a record op's Pebble key
		switch {
		case op == opSetRecord:
			ck.rk = append(append(ck.rk[:0], ck.prefix...), k...)
			rk = ck.rk
		case len(k) == 0:
			return fmt.Errorf("%w: journal op with an empty key", engine.ErrCorrupt)
		case k[0] == nsReplay:
			b, _, _, _, err := parseReplayKey(k)
			if err != nil {
				return err
			}
			if b > ended {
				ck.add(k, v, op == opDelete)
			}
			continue
		case k[0] != nsRecord: // expiry index entries
			ck.add(k, v, op == opDelete)
			continue
		}
		if _, dup := ck.seen[string(rk)]; dup {
			continue
		}
		ck.seen[string(rk)] = struct{}{}
		if len(rk) <= prefix {
			return fmt.Errorf("%w: journal record key %q", engine.ErrCorrupt, rk)
		}
		rec, ok := p.recs.get(string(rk[prefix:]))
		if !ok {
			ck.add(rk, nil, true)
			continue
		}
		ck.scratch = appendValue(ck.scratch[:0], &rec)
		ck.add(rk, ck.scratch, false)
	}
	return nil
}

// recoverJournal applies the journal rows a crash left (see checkpoint),
// in order, and deletes them, before the store serves anything: after it
// the rows hold every change that reached the log. Replay records whose
// bucket has ended at now are left out (the sweep would delete them).
// Applying them again after a crash part way through is harmless: the last
// op of each row wins, as before.
func (s *Store) recoverJournal(now int64) error {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{nsJournal}, UpperBound: []byte{nsJournal + 1}})
	if err != nil {
		return unavailable(err)
	}
	pb := s.db.NewBatch()
	defer func() { _ = pb.Close() }()
	ended := lastEnded(now)
	var last uint64
	var prefix, key []byte
	rows := 0
	for ok := iter.First(); ok; ok = iter.Next() {
		seq, err := parseJournalKey(iter.Key())
		if err != nil {
			_ = iter.Close()
			return err
		}
		ops, err := iter.ValueAndErr()
		if err != nil {
			_ = iter.Close()
			return unavailable(err)
		}
		prefix = prefix[:0] // of the last record op's partition
		for len(ops) > 0 {
			op, k, v, rest, err := nextOp(ops)
			if err != nil {
				_ = iter.Close()
				return err
			}
			ops = rest
			switch {
			case op == opSetRecord:
				if len(prefix) == 0 {
					_ = iter.Close()
					return fmt.Errorf("%w: journal row %d sets record %q of no partition", engine.ErrCorrupt, seq, k)
				}
				_ = pb.Set(append(append(key[:0], prefix...), k...), v, nil)
				continue
			case len(k) > 0 && k[0] == nsRecord:
				p, _, err := parseRecordKey(k)
				if err != nil {
					_ = iter.Close()
					return err
				}
				prefix = appendPartitionPrefix(prefix[:0], string(p))
			}
			if len(k) > 0 && op == opSet && (k[0] == nsReplay || k[0] == nsReplayV4) {
				// A journal of format 4 names "o" rows, which migrateReplays
				// moves once the journal is applied.
				b, err := replayRowBucket(k)
				if err != nil || b <= ended {
					continue // a bad key is never written; an ended bucket need not be
				}
			}
			if op == opSet {
				_ = pb.Set(k, v, nil)
			} else {
				_ = pb.Delete(k, nil)
			}
		}
		last, rows = seq, rows+1
		if pb.Len() >= recoverBatchBytes {
			if err := s.db.Apply(pb, pebble.NoSync); err != nil {
				_ = iter.Close()
				return unavailable(err)
			}
			pb.Reset()
		}
	}
	if err := iter.Close(); err != nil {
		return unavailable(err)
	}
	if rows == 0 {
		return nil
	}
	_ = pb.DeleteRange([]byte{nsJournal}, []byte{nsJournal + 1}, nil)
	if err := s.db.Apply(pb, pebble.NoSync); err != nil {
		return unavailable(err)
	}
	// The log is written in order: fsyncing now fsyncs the rows.
	if err := s.logSync(); err != nil {
		return unavailable(err)
	}
	s.jseq.Store(last)
	s.ckptTo = last
	s.log.Info("diskstore: applied the journal left by an unclean stop", "dir", s.cfg.Dir, "rows", rows)
	return nil
}

// recoverBatchBytes bounds one batch of recoverJournal.
const recoverBatchBytes = 4 << 20

// writeRows writes the rows of p's pending journal ops at once, so that p,
// dirty but otherwise idle, may be evicted (see evictable); the next
// checkpoint deletes their journal rows. It reports false, writing
// nothing, if p is busy (a round or a checkpoint holds its lock, or a
// checkpoint is writing its rows) or the rows cannot be written. The
// caller holds p's shard's lock.
func (s *Store) writeRows(p *partition) bool {
	if !p.mu.TryLock() {
		return false
	}
	defer p.mu.Unlock()
	if len(p.flushing.ops) > 0 || s.failure() != nil {
		return false
	}
	var ck ckptBuf
	if err := s.checkpointRows(&ck, p, p.pend.ops, lastEnded(engine.UnixMilli(s.clock))); err != nil {
		_ = s.failIn("checkpoint", err)
		return false
	}
	pb := s.db.NewBatch()
	defer func() { _ = pb.Close() }()
	ck.write(pb)
	if err := s.db.Apply(pb, pebble.NoSync); err != nil {
		_ = s.failIn("checkpoint", err) // see checkpoint
		return false
	}
	s.pendBytes.Add(-int64(len(p.pend.ops)))
	p.pend = pendingOps{}
	p.dirty.Store(false) // the checkpoint that takes p from s.dirty finds nothing
	return true
}

// replayRowBucket returns the bucket of a replay row's key, of this format or
// of format 4.
func replayRowBucket(k []byte) (int64, error) {
	if k[0] == nsReplayV4 {
		b, _, _, err := parseReplayKeyV4(k)
		return b, err
	}
	b, _, _, _, err := parseReplayKey(k)
	return b, err
}

// replayPrint returns the fingerprint, with seed, of replay key k without
// its slice (see sameReplay). k is at least replayHead bytes long.
func replayPrint(seed maphash.Seed, k []byte) uint64 {
	return maphash.Bytes(seed, k[replayHead:]) ^ binary.BigEndian.Uint64(k[1:])*0x9e3779b97f4a7c15
}
