package dsync

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// sharedDial is the rueidis client a Client sends its commands through.
//
// rueidis makes a connection once for every caller that needs it at that
// moment, under the context of the caller that needed it first: if that
// context ends during the dial or the handshake, every caller waiting for
// the connection gets that context's error (context.Canceled,
// DeadlineExceeded, or "dial ...: operation was canceled"), its own
// context live and its command never sent. rueidis sends such a command
// again itself only when it is read-only; the scripts would fail, and an
// acquisition whose wait had seconds left would return "redis connection:
// context deadline exceeded" because another caller gave up a 5 ms wait
// during a reconnect. sharedDial sends them again, twice at most. A
// context error with the caller's context live can come only from a dial
// made under another context (a command sent under the caller's context
// fails with that context's error, or with the connection's), so the
// command did not run.
//
// It also records when a call last failed without a reply from Redis (a
// broken connection, a dial that failed or was cut short, a call whose
// context ended on a connection rueidis then closes): from then on calls
// may wait for a connection being opened again (see Client.inDoubt).
type sharedDial struct {
	rueidis.Client
	doubt *atomic.Int64 // unix ns of the last such failure (Client.connDoubt)
}

func (d sharedDial) failed(err error) {
	if err != nil && d.doubt != nil {
		d.doubt.Store(time.Now().UnixNano())
	}
}

// dialResends bounds the resends of one command. The dial's own handshake
// timeout gives the same error as another caller's deadline, so against a
// server that accepts connections but does not answer, a call without a
// deadline fails after 1+dialResends of those timeouts instead of one.
const dialResends = 2

// othersDial reports an error that a dial under another caller's context
// gave a caller whose ctx is live.
func othersDial(ctx context.Context, err error) bool {
	return err != nil && ctxErr(ctx) == nil &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

func (d sharedDial) Do(ctx context.Context, cmd rueidis.Completed) (resp rueidis.RedisResult) {
	cmd = pinResent(cmd)
	for i := 0; ; i++ {
		// rueidis keeps a command that failed without a reply from Redis
		// (it recycles only the others), so it can be sent again.
		resp = d.Client.Do(ctx, cmd)
		err := resp.NonRedisError()
		d.failed(err)
		if i == dialResends || !othersDial(ctx, err) {
			return d.unreachable(resp, err)
		}
		cmd = cmd.Pin()
	}
}

// pinResent pins cmd if rueidis may send it again after a connection broke
// under it (a read-only command: rueidis retries those). rueidis recycles
// a command for the next Build once a send of it gets a reply, but the
// broken connection's writer goroutine may have read it last with nothing
// ordering that read before the recycling (the soak of 718699e, and
// TestResentCommandIsNotRecycled: a data race, and a command rebuilt under
// a writer still reading it). A pinned command is never recycled: one more
// allocation for its next Build, paid by read-only commands only (none is
// on a Mutex's cycle or a renewal). Commands dsync sends again itself
// (othersDial) are pinned before the resend.
func pinResent(cmd rueidis.Completed) rueidis.Completed {
	if cmd.IsRetryable() {
		return cmd.Pin()
	}
	return cmd
}

// unreachable returns resp with its error err, if the connection failed
// (see connFailed), wrapped in an unreachableError: the one place where
// every Redis call's error passes, so that every error that follows says
// which Redis could not be reached. Nothing is allocated otherwise.
func (d sharedDial) unreachable(resp rueidis.RedisResult, err error) rueidis.RedisResult {
	if err == nil || !connFailed(err) {
		return resp
	}
	return rueidis.NewErrorResult(&unreachableError{addr: d.addrOf(err), err: err})
}

// connFailed reports whether err says that the connection to Redis could
// not be made or broke: a network error (a dial, a reset, a timeout of the
// connection), or EOF. Not a context's end, nor a closed client.
func connFailed(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rueidis.ErrClosing) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// addrOf names the Redis that err came from: the address in err, if any,
// else the node the client knows, or up to three of its nodes.
func (d sharedDial) addrOf(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Addr != nil {
		return oe.Addr.String()
	}
	var addrs []string
	for a := range d.Client.Nodes() {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	switch {
	case len(addrs) == 0:
		return "(no node known)"
	case len(addrs) == 1:
		return addrs[0]
	case len(addrs) > 3:
		return "one of " + strings.Join(addrs[:3], ", ") + ", ..."
	}
	return "one of " + strings.Join(addrs, ", ")
}

func (d sharedDial) DoMulti(ctx context.Context, multi ...rueidis.Completed) (resp []rueidis.RedisResult) {
	for i := range multi {
		multi[i] = pinResent(multi[i])
	}
	for i := 0; ; i++ {
		resp = d.Client.DoMulti(ctx, multi...)
		if len(resp) > 0 {
			d.failed(resp[0].NonRedisError())
		}
		if i == dialResends || len(resp) == 0 {
			return d.unreachableAll(resp)
		}
		// Resent only when no command got through: they all waited for
		// the same dial.
		for _, r := range resp {
			if !othersDial(ctx, r.NonRedisError()) {
				return d.unreachableAll(resp)
			}
		}
		for i := range multi {
			multi[i] = multi[i].Pin()
		}
	}
}

// unreachableAll is unreachable for each result of a pipeline.
func (d sharedDial) unreachableAll(resp []rueidis.RedisResult) []rueidis.RedisResult {
	for i, r := range resp {
		resp[i] = d.unreachable(r, r.NonRedisError())
	}
	return resp
}

// Nodes returns the client of each node, each behind sharedDial too.
// rueidis' Lua.ExecMulti sends its SCRIPT LOAD (retryable) to each node
// through them: sent through rueidis' own node client, a load that rueidis
// sent again after its connection broke was recycled while the broken
// connection's writer goroutine could still read it
// (TestSemaphoreLockerRedisRestart under the race detector: a data race
// between that writer and the next Build, in Close's releases).
func (d sharedDial) Nodes() map[string]rueidis.Client {
	nodes := d.Client.Nodes()
	for addr, n := range nodes {
		nodes[addr] = sharedDial{Client: n, doubt: d.doubt}
	}
	return nodes
}
