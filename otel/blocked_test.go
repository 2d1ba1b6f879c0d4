package dsyncotel_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	dsyncotel "github.com/dsync/dsync/otel"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// childEnv makes the test binary a holder process (see runHolder).
const childEnv = "DSYNC_OTEL_HOLDER"

// blockedLinks returns the span contexts the span called name links to as
// a holder it waited for.
func blockedLinks(spans []sdktrace.ReadOnlySpan, name string) (out []trace.SpanContext) {
	for _, s := range spans {
		if s.Name() != name {
			continue
		}
		for _, l := range s.Links() {
			for _, a := range l.Attributes {
				if a.Key == "dsync.lock.blocked_by" && a.Value.AsBool() {
					out = append(out, l.SpanContext)
				}
			}
		}
	}
	return out
}

func holdSpan(t *testing.T, tel *telemetry, name string) trace.SpanContext {
	t.Helper()
	for _, s := range tel.spans.Started() {
		if s.Name() == name {
			return s.SpanContext()
		}
	}
	t.Fatalf("no %s span", name)
	return trace.SpanContext{}
}

// In one process: a waiter queued behind a holder of its own Client (a
// Mutex's local queue), and waiters in another Client (through Redis) for
// every kind that waits in Redis, link to the holder's hold span.
func TestObserverBlockedByInProcess(t *testing.T) {
	s := server(t)
	for _, kind := range []string{"mutex-local", "mutex", "fair", "rw", "semaphore"} {
		t.Run(kind, func(t *testing.T) {
			tel := newTelemetry(t)
			prefix := newPrefix()
			c1 := client(t, s, prefix, tel.observer())
			c2 := c1
			if kind != "mutex-local" {
				c2 = client(t, s, prefix, tel.observer())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			type locker struct {
				lock   func(context.Context) (context.Context, error)
				unlock func(context.Context) error
				span   string
			}
			mk := func(c *dsync.Client) locker {
				switch kind {
				case "fair":
					m := c.NewFairMutex("x")
					return locker{m.LockContext, m.UnlockContext, "dsync.fair_mutex"}
				case "rw":
					m := c.NewRWMutex("x")
					return locker{m.LockContext, m.UnlockContext, "dsync.rw_mutex"}
				case "semaphore":
					m := c.NewSemaphore("x", 1)
					return locker{func(ctx context.Context) (context.Context, error) { return m.Acquire(ctx, 1) },
						func(ctx context.Context) error { return m.Release(ctx, 1) }, "dsync.semaphore"}
				}
				m := c.NewMutex("x")
				return locker{m.LockContext, m.UnlockContext, "dsync.mutex"}
			}
			a, b := mk(c1), mk(c2)
			la, err := a.lock(ctx)
			require.NoError(t, err)
			holder := holdSpan(t, tel, a.span+".hold")
			if kind == "mutex-local" {
				// A local queue is not visible from outside: the waiter
				// gives up while the holder holds, so it surely queued
				// behind it (a wait that ends without the lock links too).
				wctx, wcancel := context.WithTimeout(ctx, time.Second)
				defer wcancel()
				_, err := b.lock(wctx)
				require.ErrorIs(t, err, context.DeadlineExceeded, "waiter behind a holder")
				require.NoError(t, a.unlock(la))
			} else {
				done := make(chan error, 1)
				go func() {
					lb, err := b.lock(ctx)
					if err == nil {
						err = b.unlock(lb)
					}
					done <- err
				}()
				// The waiter reads the holders' tags after its first
				// attempt fails, then subscribes to its wakeup channel.
				waitFor(t, 5*time.Second, "the waiter waiting in Redis", func() bool {
					chans, err := s.Do(t, "PUBSUB", "CHANNELS", prefix+":{*").AsStrSlice() // a lock's channel
					return err == nil && len(chans) > 0
				})
				require.NoError(t, a.unlock(la))
				require.NoError(t, <-done)
			}
			links := blockedLinks(tel.spans.Ended(), b.span+".acquire")
			require.Len(t, links, 1, "links of the waiter's acquire span")
			assert.Equal(t, holder.TraceID(), links[0].TraceID(), "the link's trace: the holder's hold span's")
			assert.Equal(t, holder.SpanID(), links[0].SpanID(), "the link's span: the holder's hold span")
			// dsync.lock.queued: only the Mutex waiter of the holder's own
			// Client waited in its Client's queue; the holder's own
			// acquisition did not wait at all.
			var queued []bool
			for _, s := range tel.spans.Ended() {
				if s.Name() == b.span+".acquire" {
					q, ok := attrOf(s, dsyncotel.KeyQueued)
					assert.True(t, !ok || q.AsBool(), "dsync.lock.queued recorded as false: absent unless true")
					queued = append(queued, ok)
				}
			}
			assert.Equal(t, []bool{false, kind == "mutex-local"}, queued, "dsync.lock.queued of the holder's and the waiter's acquire spans")
		})
	}
}

// Across processes: the holder runs in a child process with its own
// tracer; the waiter's acquire span here links to the child's hold span,
// which only Redis could have told it about.
func TestObserverBlockedByAcrossProcesses(t *testing.T) {
	s := server(t)
	prefix := newPrefix()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+s.Addr+" "+prefix)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	var tp string
	select {
	case tp = <-lines:
	case <-time.After(20 * time.Second):
		t.Fatal("the holder process did not report its hold span")
	}
	var tid, sid string
	_, err = fmt.Sscanf(strings.ReplaceAll(tp, "-", " "), "00 %s %s", &tid, &sid)
	require.NoError(t, err, "holder printed %q", tp)

	tel := newTelemetry(t)
	c := client(t, s, prefix, tel.observer())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := c.NewMutex("shared").LockContext(ctx)
		if err == nil {
			err = c.NewMutex("shared").UnlockContext(l)
		}
		done <- err
	}()
	// Its first attempt failed (it counts as a waiter in Redis), it read
	// the holder's tag, then subscribed to the release channel.
	waitFor(t, 10*time.Second, "this process waiting in Redis", func() bool {
		st, err := c.Inspect(ctx, "shared")
		chans, err2 := s.Do(t, "PUBSUB", "CHANNELS", prefix+":{*").AsStrSlice() // a lock's channel
		return err == nil && err2 == nil && len(st) == 1 && len(st[0].Waiters) == 1 && len(chans) > 0
	})
	_, err = io.WriteString(stdin, "release\n")
	require.NoError(t, err)
	require.NoError(t, <-done)
	links := blockedLinks(tel.spans.Ended(), "dsync.mutex.acquire")
	require.Len(t, links, 1, "links of the acquire span")
	assert.Equal(t, tid, links[0].TraceID().String(), "the link's trace: the other process's hold span's")
	assert.Equal(t, sid, links[0].SpanID().String(), "the link's span: the other process's hold span")
	assert.True(t, links[0].IsRemote(), "the link is to a span of another process")
}

// runHolder is the child of TestObserverBlockedByAcrossProcesses: it takes
// the Mutex "shared" with its own tracer, prints its hold span's context,
// and releases when told on stdin.
func runHolder(spec string) error {
	addr, prefix, _ := strings.Cut(spec, " ")
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer rc.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(prefix), dsync.WithObserver(dsyncotel.NewObserver(dsyncotel.WithTracerProvider(tp))))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := c.NewMutex("shared")
	l, err := m.LockContext(ctx)
	if err != nil {
		return err
	}
	var sc trace.SpanContext
	for _, s := range rec.Started() {
		if s.Name() == "dsync.mutex.hold" {
			sc = s.SpanContext()
		}
	}
	fmt.Printf("00-%s-%s-%s\n", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	return m.UnlockContext(l)
}

// ownerSpan returns the span called name whose dsync.lock.owner is owner
// (the last one, if several).
func ownerSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, name, owner string) sdktrace.ReadOnlySpan {
	t.Helper()
	var out sdktrace.ReadOnlySpan
	for _, s := range spans {
		if v, _ := attrOf(s, dsyncotel.KeyOwner); s.Name() == name && v.AsString() == owner {
			out = s
		}
	}
	require.NotNil(t, out, "no %s span of owner %s", name, owner)
	return out
}

// chainLinks checks that the acquire span of owner w links, as blocked by,
// to the hold spans of owners a and b, in that order, each link with the
// seconds it held the lock during the wait (positive, at most the wait).
func chainLinks(t *testing.T, tel *telemetry, kind, w, a, b string) {
	t.Helper()
	spans := tel.spans.Ended()
	acq := ownerSpan(t, spans, "dsync."+kind+".acquire", w)
	ha := ownerSpan(t, spans, "dsync."+kind+".hold", a)
	hb := ownerSpan(t, spans, "dsync."+kind+".hold", b)
	var got []trace.SpanID
	wait := acq.EndTime().Sub(acq.StartTime()).Seconds()
	for _, l := range acq.Links() {
		if !isBlockedBy(l) {
			continue
		}
		got = append(got, l.SpanContext.SpanID())
		for _, kv := range l.Attributes {
			if kv.Key == dsyncotel.KeyBlockedFor {
				assert.Positive(t, kv.Value.AsFloat64(), "blocked_for of the link to %v", l.SpanContext.SpanID())
				assert.LessOrEqual(t, kv.Value.AsFloat64(), wait, "blocked_for of the link to %v, beyond the wait", l.SpanContext.SpanID())
			}
		}
	}
	assert.Equal(t, []trace.SpanID{ha.SpanContext().SpanID(), hb.SpanContext().SpanID()}, got,
		"links of the waiter's acquire span: the first holder's hold span, then the second's")
}

// A chain: a waiter that waited behind two holders, one after the other,
// links to both, in order: in one Client (a Mutex's local queue), across
// Clients (a Mutex: the first holder in one Client, the second and the
// waiter queued in another, the second got it in Redis and handed it on
// inside its Client), for every kind that queues in Redis (three Clients),
// an Election's campaign, an RWMutex writer behind a reader and a writer,
// and a Cond's re-acquisition of its Mutex (in one Client, queued behind
// the signaller and another goroutine).
func TestObserverBlockedByChain(t *testing.T) {
	s := server(t)
	for _, kind := range []string{"mutex-local", "mutex", "fair", "rw", "semaphore", "election", "cond"} {
		t.Run(kind, func(t *testing.T) {
			tel := newTelemetry(t)
			prefix := newPrefix()
			c1 := client(t, s, prefix, tel.observer(), dsync.WithClientName("c1"))
			c2, c3 := c1, c1
			if kind != "mutex-local" && kind != "cond" {
				c2 = client(t, s, prefix, tel.observer(), dsync.WithClientName("c2"))
				c3 = client(t, s, prefix, tel.observer(), dsync.WithClientName("c3"))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ca, cb, cw := dsync.WithOwner(ctx), dsync.WithOwner(ctx), dsync.WithOwner(ctx)
			oa, _ := dsync.OwnerOf(ca)
			ob, _ := dsync.OwnerOf(cb)
			ow, _ := dsync.OwnerOf(cw)
			waiters := func(c *dsync.Client, n int64) func() bool {
				return func() bool {
					states, err := c.Inspect(ctx, "x")
					var sum int64
					for _, st := range states {
						for _, w := range st.Waiters {
							sum += w.Count
						}
					}
					return err == nil && sum >= n
				}
			}
			type locker struct {
				lock   func(context.Context) (context.Context, error)
				unlock func(context.Context) error
			}
			mk := func(c *dsync.Client, read bool) locker {
				switch kind {
				case "fair":
					m := c.NewFairMutex("x")
					return locker{m.LockContext, m.UnlockContext}
				case "rw":
					m := c.NewRWMutex("x")
					if read {
						return locker{m.RLockContext, m.RUnlockContext}
					}
					return locker{m.LockContext, m.UnlockContext}
				case "semaphore":
					m := c.NewSemaphore("x", 1)
					return locker{func(ctx context.Context) (context.Context, error) { return m.Acquire(ctx, 1) },
						func(ctx context.Context) error { return m.Release(ctx, 1) }}
				case "election":
					e := c.NewElection("x")
					return locker{func(ctx context.Context) (context.Context, error) { return e.Campaign(ctx, "v") }, e.Resign}
				}
				m := c.NewMutex("x")
				return locker{m.LockContext, m.UnlockContext}
			}
			span := map[string]string{"mutex-local": "mutex", "mutex": "mutex", "fair": "fair_mutex", "rw": "rw_mutex",
				"semaphore": "semaphore", "election": "election", "cond": "mutex"}[kind]
			done := make(chan error, 1)
			if kind == "cond" {
				// The waiter holds the Mutex and waits on the Cond; a
				// takes the Mutex, b queues behind a, and a's signal
				// wakes the waiter, whose re-acquisition queues behind b.
				m := c1.NewMutex("x")
				lw, err := m.LockContext(cw)
				require.NoError(t, err)
				cond := c1.NewCond(m)
				go func() {
					l, err := cond.Wait(lw)
					if err == nil {
						err = m.UnlockContext(l)
					}
					done <- err
				}()
				waitFor(t, 5*time.Second, "the waiter in Wait", func() bool {
					l, ok, err := m.TryLockContext(ca)
					if ok {
						ca = l // a holds from here
					}
					return err == nil && ok
				})
				bdone := make(chan error, 1)
				go func() {
					lb, err := m.LockContext(cb)
					if err == nil {
						err = m.UnlockContext(lb)
					}
					bdone <- err
				}()
				waitFor(t, 5*time.Second, "b queued behind a", waiters(c1, 1))
				require.NoError(t, cond.Signal(ctx))
				waitFor(t, 5*time.Second, "the waiter re-acquiring behind b", waiters(c1, 2))
				require.NoError(t, m.UnlockContext(ca))
				require.NoError(t, <-bdone)
				require.NoError(t, <-done)
				chainLinks(t, tel, span, ow, oa, ob)
				return
			}
			a, b, w := mk(c1, true), mk(c2, false), mk(c3, false)
			switch kind {
			case "mutex-local":
				b, w = mk(c1, false), mk(c1, false)
			case "mutex":
				// b leads c2's goroutines in Redis, w queues behind it.
				w = mk(c2, false)
			}
			la, err := a.lock(ca)
			require.NoError(t, err)
			bdone := make(chan error, 1)
			go func() {
				lb, err := b.lock(cb)
				if err == nil {
					err = b.unlock(lb)
				}
				bdone <- err
			}()
			waitFor(t, 5*time.Second, "b waiting", waiters(c1, 1))
			go func() {
				lw, err := w.lock(cw)
				if err == nil {
					err = w.unlock(lw)
				}
				done <- err
			}()
			waitFor(t, 5*time.Second, "w waiting behind b", waiters(c1, 2))
			require.NoError(t, a.unlock(la))
			require.NoError(t, <-bdone)
			require.NoError(t, <-done)
			chainLinks(t, tel, span, ow, oa, ob)
		})
	}
}
