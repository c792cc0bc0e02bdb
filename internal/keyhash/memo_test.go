package keyhash_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/internal/keyhash"
)

// fresh is the name of purpose and value under pepper computed here,
// without a Hasher.
func fresh(purpose, value string) string { return freshWith(pepper, purpose, value) }

// freshWith is the name of purpose and value under p computed here: the
// whole MAC in hex, or for a pepper in the compact form its first 16 bytes
// in unpadded base64url.
func freshWith(p, purpose, value string) string {
	m := hmac.New(sha256.New, []byte(p))
	m.Write([]byte(purpose + "\x00" + value))
	if strings.HasPrefix(p, "pepper-v2:") {
		return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
	}
	return hex.EncodeToString(m.Sum(nil))
}

type input struct{ purpose, value string }

// memoInputs returns inputs that a memo keyed carelessly would confuse:
// one value under two purposes, purposes of one length, the zero byte's
// place moved between purpose and value, values of one length, prefixes,
// and values either side of the longest input memoised.
func memoInputs() []input {
	var in []input
	for _, v := range []string{"", "a", "ab", "b", "user:42", "user:43", "user:42\x00", "\x00", "é", strings.Repeat("x", 200)} {
		for _, p := range []string{keyhash.PurposePartition, keyhash.PurposeKey, "kez", "k", "ke", ""} {
			in = append(in, input{p, v})
		}
	}
	in = append(in, input{"ab", "cd"}, input{"abc", "d"}, input{"a", "bcd"}, input{"ab", "\x00d"}, input{"a", "\x00cd"})
	for _, p := range []string{keyhash.PurposePartition, keyhash.PurposeKey} {
		for n := keyhash.MemoMaxIn - 3; n <= keyhash.MemoMaxIn+3; n++ {
			if l := n - len(p) - 1; l >= 0 {
				in = append(in, input{p, strings.Repeat("v", l)}, input{p, strings.Repeat("w", l)})
			}
		}
		in = append(in, input{p, strings.Repeat("long", 1000)})
	}
	for i := range 3000 {
		in = append(in, input{keyhash.PurposeKey, "user:" + strconv.Itoa(i)}, input{keyhash.PurposePartition, "user:" + strconv.Itoa(i)})
	}
	return in
}

// TestMemoGivesTheFreshHash hashes each input several times, in rounds, so
// that later rounds are answered from the memo, and requires every answer
// to equal the HMAC computed here; on a Hasher whose memo puts every input
// in one set under one tag too, where only the comparison of the whole
// input tells entries apart.
func TestMemoGivesTheFreshHash(t *testing.T) {
	ins := memoInputs()
	want := make([]string, len(ins))
	for i, in := range ins {
		want[i] = fresh(in.purpose, in.value)
	}
	for _, c := range []struct {
		name string
		h    *keyhash.Hasher
	}{{"plain", keyhash.New([]byte(pepper))}, {"narrow", keyhash.NewNarrow([]byte(pepper))}} {
		for round := range 4 {
			for i, in := range ins {
				if got := c.h.Hash(in.purpose, in.value); got != want[i] {
					t.Fatalf("%s, round %d: Hash(%q, %q) = %s, want %s", c.name, round, in.purpose, in.value, got, want[i])
				}
				// At once again, from the memo after the second miss.
				for range 3 {
					if got := c.h.Hash(in.purpose, in.value); got != want[i] {
						t.Fatalf("%s, round %d, repeated: Hash(%q, %q) = %s, want %s", c.name, round, in.purpose, in.value, got, want[i])
					}
				}
			}
		}
	}
}

// TestRepeatedHashIsRemembered checks that the memo answers: from the
// third time on, a hash is the same string, not a new one; and a value too
// long for the memo is never remembered.
func TestRepeatedHashIsRemembered(t *testing.T) {
	h := keyhash.New([]byte(pepper))
	for range 2 {
		h.Hash(keyhash.PurposeKey, "user:42")
	}
	a, b := h.Hash(keyhash.PurposeKey, "user:42"), h.Hash(keyhash.PurposeKey, "user:42")
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Error("a repeated hash was computed again")
	}
	if n := h.MemoLen(); n != 1 {
		t.Errorf("memo holds %d entries, want 1", n)
	}

	h = keyhash.New([]byte(pepper))
	long := strings.Repeat("v", keyhash.MemoMaxIn-len(keyhash.PurposeKey)) // one byte over
	for range 4 {
		if got, want := h.Hash(keyhash.PurposeKey, long), fresh(keyhash.PurposeKey, long); got != want {
			t.Fatalf("long value: %s, want %s", got, want)
		}
	}
	if n := h.MemoLen(); n != 0 {
		t.Errorf("memo holds %d entries after a value too long for it, want 0", n)
	}
}

// TestMemoIsBounded hashes many distinct values, each twice so that each
// is remembered, and requires the memo never to hold more than its bound.
func TestMemoIsBounded(t *testing.T) {
	h := keyhash.New([]byte(pepper))
	for i := range 8 * keyhash.MemoEntries {
		v := "user:" + strconv.Itoa(i)
		h.Hash(keyhash.PurposeKey, v)
		h.Hash(keyhash.PurposeKey, v)
		if i%1024 == 0 {
			if n := h.MemoLen(); n > keyhash.MemoEntries {
				t.Fatalf("after %d values the memo holds %d entries, more than %d", i+1, n, keyhash.MemoEntries)
			}
		}
	}
	if n := h.MemoLen(); n > keyhash.MemoEntries || n < keyhash.MemoEntries*9/10 {
		t.Errorf("the memo holds %d entries, want at most %d and nearly as many", n, keyhash.MemoEntries)
	}
}

// TestMemoUnderConcurrentUse has 64 goroutines hash overlapping inputs at
// once, each from its own place in them, on a plain Hasher (many sets,
// entries replaced as they churn) and on a narrow one (one set, every
// goroutine replacing the same four entries); every answer must be the
// fresh hash. Run with -race.
func TestMemoUnderConcurrentUse(t *testing.T) {
	ins := memoInputs()
	want := make([]string, len(ins))
	for i, in := range ins {
		want[i] = fresh(in.purpose, in.value)
	}
	for _, h := range []*keyhash.Hasher{keyhash.New([]byte(pepper)), keyhash.NewNarrow([]byte(pepper))} {
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				for k := range 2 * len(ins) {
					i := (g*97 + k) % len(ins)
					if got := h.Hash(ins[i].purpose, ins[i].value); got != want[i] {
						t.Errorf("Hash(%q, %q) = %s, want %s", ins[i].purpose, ins[i].value, got, want[i])
						return
					}
				}
			})
		}
		wg.Wait()
	}
}
