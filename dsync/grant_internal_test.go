package dsync

import (
	"testing"
	"time"
)

// grantStart maps a grant's server time onto the local clock through the
// last attempt's (send time, server time) pair, never later than the grant
// can have been: 1/100 of the gap off for the clocks' rates, never after
// the grant was seen; a grant it cannot date after the attempt (a time
// missing, or the grant before the attempt: one the waiter may have
// outlived, issue 25) is not dated at all, and grantClock does not return
// it live however recent the attempt.
func TestGrantStart(t *testing.T) {
	sent := time.Unix(1000, 0)
	now := sent.Add(3 * time.Second)
	const srv = 5_000_000_000_000 // µs
	for _, c := range []struct {
		name      string
		srvAt, at uint64
		now       time.Time
		want      time.Time
		ok        bool
	}{
		{"no attempt time", 0, srv + 2_000_000, now, time.Time{}, false},
		{"no grant time", srv, 0, now, time.Time{}, false},
		{"grant before the attempt", srv, srv - 1, now, time.Time{}, false},
		{"grant at the attempt", srv, srv, now, time.Time{}, false},
		{"2 s after the attempt", srv, srv + 2_000_000, now, sent.Add(2*time.Second - 20*time.Millisecond), true},
		{"after it was seen", srv, srv + 10_000_000, now, now, true},
	} {
		got, ok := grantStart(sent, c.now, c.srvAt, c.at)
		if ok != c.ok || !got.Equal(c.want) {
			t.Errorf("%s: grantStart = %v after the send, %v; want %v, %v", c.name, got.Sub(sent), ok, c.want.Sub(sent), c.ok)
		}
	}
	// A grant older than an attempt sent just now is not returned.
	if _, live := grantClock(time.Now(), srv, srv-1, time.Second); live {
		t.Error("a grant older than the last attempt is live")
	}
	lease := time.Second
	v := validity(lease)
	if !grantLive(now, now, lease) {
		t.Error("a grant seen as it came is not live")
	}
	if !grantLive(now.Add(-v/2), now, lease) {
		t.Error("a grant with half its validity left is not live")
	}
	if grantLive(now.Add(-v/2-time.Millisecond), now, lease) {
		t.Error("a grant with less than half its validity left is live")
	}
	if grantLive(now.Add(-2*lease), now, lease) {
		t.Error("a grant whose lease ran out is live")
	}
}
