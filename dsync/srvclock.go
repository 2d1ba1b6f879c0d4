package dsync

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"
)

// The deadline undo (doc.go, "What is guaranteed"): a Mutex owner made for one
// LockContext carries a deadline in server seconds, after which the first
// attempt of its wait, sent as the owner alone (mutex_acquire.lua), does
// nothing. Such an attempt needs no tombstone (no key read besides the
// lock): a wait cancelled while its reply is lost is undone at once as any
// other, and once more when the server clock has passed the deadline, after
// which no copy of the attempt can arrive and apply.

// deadlineAfter is how long after the owner is made its first attempt may
// still apply, at most (the deadline is in whole seconds, rounded down: at
// least a second less): longer than the round trips a wait sees, short
// enough that the undo of a lost reply stops running again within
// seconds (lateUndo).
const deadlineAfter = 2 * time.Second

// serverClock is the server clock as a Client last saw it: the server's µs
// less the local monotonic µs (tick) when the reply that carried it
// arrived; 0 until one did. A reply arrives after the server read its
// clock, so the estimate (now) is never ahead of the server, but for the
// two clocks' drift since: once the estimate has passed a deadline, the
// server has too.
type serverClock struct{ off atomic.Int64 }

// see records a server clock reading srvUS (µs) from a reply that arrived
// at at. A reading of 0 or less is no reading.
func (k *serverClock) see(srvUS int64, at time.Time) {
	if srvUS <= 0 {
		return
	}
	off := srvUS - tick(at)/1000
	if off == 0 {
		off = 1
	}
	k.off.Store(off)
}

// known reports whether a reading was seen.
func (k *serverClock) known() bool { return k.off.Load() != 0 }

// now is the estimate of the server clock in µs (0: unknown).
func (k *serverClock) now() int64 {
	off := k.off.Load()
	if off == 0 {
		return 0
	}
	return off + tick(time.Now())/1000
}

// deadline is the deadline of an owner made now, in server seconds (0:
// the server clock is unknown, or past what 10 digits hold).
func (k *serverClock) deadline() int64 {
	us := k.now()
	if us <= 0 {
		return 0
	}
	s := (us + deadlineAfter.Microseconds()) / 1e6
	if s >= 1e10 {
		return 0
	}
	return s
}

// appendDeadlineOwner appends to dst, and returns, key + sep + a fresh
// Mutex owner with deadline dl (server seconds; 0: none): ident, the
// deadline in 10 decimal digits and n's low 24 bits in 6 hex digits (the
// owner is unique in its Client: n counts the owners it made), so that the
// acquire script reads the deadline as the 16th to 7th characters from the
// end. Without a deadline the 16 characters after ident are random hex
// digits, the first a letter ('f'), never a digit: ownerDeadline tells the
// two apart. Either way the owner is ident and 16 hex digits (with the
// ident's 64 random bits, it has the 128 bits of newOwnerBuf's), and a
// script can tell the Client from the owner alone (mutex_acquire.lua: the
// owner less its last 16 characters). If dst has room
// for spare more bytes after them, ownerTag can fill it in place.
func appendDeadlineOwner(dst []byte, key, sep, ident string, dl int64, n uint32, spare int) []byte {
	if need := len(key) + len(sep) + len(ident) + 16 + spare; cap(dst)-len(dst) < need {
		dst = make([]byte, len(dst), len(dst)+need)
	}
	b := append(dst, key...)
	b = append(b, sep...)
	b = append(b, ident...)
	if dl <= 0 {
		var r [8]byte
		_, _ = rand.Read(r[:])
		b = hex.AppendEncode(b, r[:])
		b[len(b)-16] = 'f'
		return b
	}
	var d [10]byte
	s := strconv.AppendInt(d[:0], dl, 10)
	for range 10 - len(s) {
		b = append(b, '0')
	}
	b = append(b, s...)
	const hexDigits = "0123456789abcdef"
	for shift := 20; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[(n>>shift)&0xf])
	}
	return b
}

// freshOwnerRoom is the room a freshMutexOwner has for its owner's bytes:
// key and ident together up to 94 bytes, ":x:", 16 and ownerTagRoom; with
// the hold, 416 bytes, a size class of Go's allocator (TestHoldSizeClass).
const freshOwnerRoom = 136

// freshMutexOwner is a fresh Mutex owner's bytes (its undo mark's, the
// owner their suffix, with room for ownerTag), if they fit in arr, and the
// hold it makes when it acquires in Redis, in one allocation: the hold
// keeps the bytes anyway (its owner and renewal value are strings of
// them).
type freshMutexOwner struct {
	h   hold
	arr [freshOwnerRoom]byte
}

// bytes returns the bytes of mark, made by appendDeadlineOwner on arr:
// arr's, with its room after them, or, if they did not fit there, theirs
// without room (ownerTag then allocates).
func (fo *freshMutexOwner) bytes(mark string) []byte {
	if p := unsafe.StringData(mark); p != &fo.arr[0] {
		return unsafe.Slice(p, len(mark))
	}
	return fo.arr[:len(mark)]
}

// ownerDeadline returns the deadline a fresh owner carries
// (appendDeadlineOwner), in server seconds, or 0.
func ownerDeadline(owner string) int64 {
	if len(owner) < 16 {
		return 0
	}
	var dl int64
	for _, ch := range owner[len(owner)-16 : len(owner)-6] {
		if ch < '0' || ch > '9' {
			return 0
		}
		dl = dl*10 + int64(ch-'0')
	}
	return dl
}
