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
