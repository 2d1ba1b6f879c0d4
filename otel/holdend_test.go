package dsyncotel_test

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A hold span ends when dsync recorded the hold's end for its waiters
// (its release sent to Redis), so that its overlap with a waiter's wait is
// that waiter's link's blocked_for. Here the holder's release takes 200 ms
// to reach Redis (a proxy holds what its Client sends): before, the hold
// span ended when the release's reply came back, 200 ms after the moment
// the waiter's blocked_for counted to, and a report summing blocked_for
// fell short of what the spans showed (examples/contention's check, with
// both CPUs busy: 0.89 of it).
func TestHoldSpanEndsWhereBlockedForCounts(t *testing.T) {
	s := server(t)
	var delay atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", s.Addr)
			if err != nil {
				in.Close()
				continue
			}
			go func() { _, _ = io.Copy(in, out); in.Close() }()
			go func() {
				defer out.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := in.Read(buf)
					if err != nil {
						return
					}
					if d := time.Duration(delay.Load()); d > 0 {
						time.Sleep(d)
					}
					if _, err := out.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{l.Addr().String()}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(rc.Close)

	tel := newTelemetry(t)
	prefix := newPrefix()
	holder, err := dsync.NewClient(rc, dsync.WithKeyPrefix(prefix), dsync.WithObserver(tel.observer()))
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close() })
	waiter := client(t, s, prefix, tel.observer())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held, err := holder.NewMutex("end").LockContext(ctx)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		lctx, err := waiter.NewMutex("end").LockContext(ctx)
		if err == nil {
			err = waiter.NewMutex("end").UnlockContext(lctx)
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter waiting", func() bool {
		v, _ := tel.value(t, "dsync.lock.waiters")
		return v == 1
	})
	time.Sleep(50 * time.Millisecond) // a wait long enough to measure
	delay.Store(int64(200 * time.Millisecond))
	require.NoError(t, holder.NewMutex("end").UnlockContext(held))
	delay.Store(0)
	require.NoError(t, <-got)

	var hold, acq sdktrace.ReadOnlySpan
	for _, sp := range tel.spans.Ended() {
		switch {
		case sp.Name() == "dsync.mutex.hold" && hold == nil:
			hold = sp // the holder's: it ended first
		case sp.Name() == "dsync.mutex.acquire" && len(sp.Links()) > 0:
			acq = sp
		}
	}
	require.NotNil(t, hold, "the holder's hold span")
	require.NotNil(t, acq, "the waiter's acquire span, linked")
	var blockedFor float64
	for _, l := range acq.Links() {
		if l.SpanContext.SpanID() == hold.SpanContext().SpanID() {
			for _, a := range l.Attributes {
				if a.Key == "dsync.lock.blocked_for" {
					blockedFor = a.Value.AsFloat64()
				}
			}
		}
	}
	require.Positive(t, blockedFor, "the waiter's link to the hold, with its blocked_for")
	from, to := acq.StartTime(), hold.EndTime()
	if hold.StartTime().After(from) {
		from = hold.StartTime()
	}
	overlap := to.Sub(from).Seconds()
	t.Logf("hold span overlaps the wait %.1f ms, the link's blocked_for %.1f ms", overlap*1e3, blockedFor*1e3)
	assert.InDelta(t, blockedFor, overlap, 0.02, "the hold span's overlap with the wait and the link's blocked_for (s)")
}
