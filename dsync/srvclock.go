package dsync

import (
	"strconv"
	"sync/atomic"
	"time"
)

// The deadline undo (doc.go, "What is guaranteed"): a Mutex owner made for one
// LockContext carries a deadline in server seconds, after which the first
// attempt of its wait, sent as the owner alone (mutex_acquire.lua), does
// nothing. Such an attempt needs no tombstone (no key read besides the
// lock): a wait cancelled while its reply is lost is undone at once as any
// other, and once more when the server clock has passed the deadline, after
// which no copy of the attempt can arrive and apply.

// deadlineAfter is how long after the owner is made its first attempt may
// still apply: longer than any round trip a wait ends on, short enough that
// the second undo of a lost reply comes within seconds.
const deadlineAfter = 5 * time.Second

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

// newDeadlineOwnerBuf is newClientOwnerBuf for an owner with a deadline
// (dl, server seconds, 0 for none): key + sep + ident + the deadline in 10
// decimal digits + n's low 24 bits in 6 hex digits (the owner is unique in
// its Client: n counts the owners it made), so that the acquire script
// reads the deadline as the 16th to 7th characters from the end. Without a
// deadline it is newClientOwnerBuf's, whose 16 random hex digits then
// begin with a letter ('f'), never a digit: ownerDeadline tells the two
// apart. Either way the owner is ident and 16 hex digits, as the script's
// one-argument form needs.
func newDeadlineOwnerBuf(key, sep, ident string, dl int64, n uint32, spare int) []byte {
	if dl <= 0 {
		b := newClientOwnerBuf(key, sep, ident, spare)
		b[len(b)-16] = 'f'
		return b
	}
	b := make([]byte, 0, len(key)+len(sep)+len(ident)+16+spare)
	b = append(b, key...)
	b = append(b, sep...)
	b = append(b, ident...)
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

// ownerDeadline returns the deadline a fresh owner carries
// (newDeadlineOwnerBuf), in server seconds, or 0.
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
