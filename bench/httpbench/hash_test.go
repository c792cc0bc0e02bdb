package httpbench

import (
	"crypto/aes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"hash"
	"testing"

	"github.com/dchest/siphash"
)

// BenchmarkPartitionHash measures the keyed hashes a route-quota stage
// could name a client's partition with (docs/decisions/0072 and 0074), each
// turning a 33-byte message ("sluice/httplimit" 0 "bench" 0 and an IPv4
// bucket) into the name "bench:" and 32 hex digits:
//
//	hmac         HMAC-SHA256 through crypto/hmac, reset between calls (the
//	             stage's until decision 0074)
//	hmac-states  HMAC-SHA256 by hand: two sha256 digests whose keyed
//	             states, the inner one past the message's fixed start, are
//	             restored with UnmarshalBinary
//	sha256       one SHA-256 of the message, unkeyed: one compression, for
//	             scale
//	siphash      SipHash-2-4 with a 128-bit result (the stage's since
//	             decision 0074, which hashes the bucket alone under a key
//	             derived from the pepper and the prefix)
//	aes-cbcmac   an AES-128 CBC-MAC of the message's three blocks
//
// TestPartitionHashes holds hmac and hmac-states equal.
func BenchmarkPartitionHash(b *testing.B) {
	for _, bc := range []struct {
		name string
		new  func() func(dst []byte) []byte
	}{
		{"hmac", hashHMAC},
		{"hmac-states", hashHMACStates},
		{"sha256", hashSHA256},
		{"siphash", hashSipHash},
		{"aes-cbcmac", hashAESCBCMAC},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := bc.new()
			dst := make([]byte, 0, 64)
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				dst = f(dst[:0])
			}
			if cpu := processCPU() - cpu; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// The message and key of BenchmarkPartitionHash.
var (
	hashSeed = []byte("sluice/httplimit\x00bench\x00")
	hashKey  = []byte("10.0.12.34")
	hashMsg  = append(append([]byte(nil), hashSeed...), hashKey...)
)

// appendName appends the partition name of a 128-bit sum to dst.
func appendName(dst, sum []byte) []byte {
	return hex.AppendEncode(append(dst, "bench:"...), sum[:16])
}

func hashHMAC() func([]byte) []byte {
	mac := hmac.New(sha256.New, []byte(pepper))
	var sum [sha256.Size]byte
	return func(dst []byte) []byte {
		mac.Reset()
		mac.Write(hashMsg)
		return appendName(dst, mac.Sum(sum[:0]))
	}
}

type marshalable interface {
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

func hashHMACStates() func([]byte) []byte {
	var ipad, opad [64]byte
	copy(ipad[:], pepper)
	copy(opad[:], pepper)
	for i := range ipad {
		ipad[i] ^= 0x36
		opad[i] ^= 0x5c
	}
	in, out := sha256.New(), sha256.New()
	in.Write(ipad[:])
	in.Write(hashSeed)
	out.Write(opad[:])
	istate, _ := in.(marshalable).MarshalBinary()
	ostate, _ := out.(marshalable).MarshalBinary()
	var sum [sha256.Size]byte
	return func(dst []byte) []byte {
		in.(marshalable).UnmarshalBinary(istate)
		in.Write(hashKey)
		in.Sum(sum[:0])
		out.(marshalable).UnmarshalBinary(ostate)
		out.Write(sum[:])
		return appendName(dst, out.Sum(sum[:0]))
	}
}

func hashSHA256() func([]byte) []byte {
	var h hash.Hash = sha256.New()
	var sum [sha256.Size]byte
	return func(dst []byte) []byte {
		h.Reset()
		h.Write(hashMsg)
		return appendName(dst, h.Sum(sum[:0]))
	}
}

func hashSipHash() func([]byte) []byte {
	const k0, k1 = 0x0706050403020100, 0x0f0e0d0c0b0a0908
	var sum [16]byte
	return func(dst []byte) []byte {
		a, b := siphash.Hash128(k0, k1, hashMsg)
		for i := range 8 {
			sum[i], sum[8+i] = byte(a>>(8*i)), byte(b>>(8*i))
		}
		return appendName(dst, sum[:])
	}
}

func hashAESCBCMAC() func([]byte) []byte {
	block, err := aes.NewCipher([]byte(pepper)[:16])
	if err != nil {
		panic(err)
	}
	var st [aes.BlockSize]byte
	return func(dst []byte) []byte {
		st = [aes.BlockSize]byte{}
		for off := 0; off < len(hashMsg); off += aes.BlockSize {
			for i := 0; i < aes.BlockSize && off+i < len(hashMsg); i++ {
				st[i] ^= hashMsg[off+i]
			}
			block.Encrypt(st[:], st[:])
		}
		return appendName(dst, st[:])
	}
}

// TestPartitionHashes checks that the hand-made HMAC of
// BenchmarkPartitionHash gives the stage's names, from a fresh state and
// after earlier calls.
func TestPartitionHashes(t *testing.T) {
	want, got := hashHMAC(), hashHMACStates()
	for range 3 {
		w, g := want(nil), got(nil)
		if string(w) != string(g) {
			t.Fatalf("hmac-states gives %s, hmac %s", g, w)
		}
	}
}
