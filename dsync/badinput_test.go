package dsync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

func TestNewClientBadInput(t *testing.T) {
	rc := newRueidis(t)
	for _, tc := range []struct {
		name string
		opts []dsync.Option
		err  bool
	}{
		{"nil option ignored", []dsync.Option{nil}, false},
		{"prefix with a brace", []dsync.Option{dsync.WithKeyPrefix("a{b")}, true},
		{"empty prefix", []dsync.Option{dsync.WithKeyPrefix("")}, true},
		{"negative lease means default", []dsync.Option{dsync.WithLease(-time.Second)}, false},
		{"zero lease means default", []dsync.Option{dsync.WithLease(0)}, false},
		{"lease too short", []dsync.Option{dsync.WithLease(time.Millisecond)}, true},
		{"nil logger keeps default", []dsync.Option{dsync.WithLogger(nil)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := dsync.NewClient(rc, tc.opts...)
			if tc.err {
				require.ErrorIs(t, err, dsync.ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			c.Close()
		})
	}
	_, err := dsync.NewClient(nil)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument, "nil rueidis client")
}

func TestMutexBadInput(t *testing.T) {
	c := newClient(t)
	rc := newRueidis(t)
	var nilCtx context.Context
	for _, tc := range []struct {
		name string
		mu   string
		ctx  context.Context
		want error
	}{
		{"empty name", "", context.Background(), dsync.ErrInvalidArgument},
		{"name over MaxNameLen", strings.Repeat("x", dsync.MaxNameLen+1), context.Background(), dsync.ErrInvalidArgument},
		{"1 MB name", strings.Repeat("y", 1<<20), context.Background(), dsync.ErrInvalidArgument},
		{"nil context", "ok", nilCtx, dsync.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := c.NewMutex(tc.mu)
			_, err := m.LockContext(tc.ctx)
			require.ErrorIs(t, err, tc.want, "LockContext")
			_, _, err = m.TryLockContext(tc.ctx)
			require.ErrorIs(t, err, tc.want, "TryLockContext")
			require.ErrorIs(t, m.UnlockContext(tc.ctx), tc.want, "UnlockContext")
			if tc.mu != "ok" {
				require.False(t, m.TryLock(), "TryLock succeeded")
			}
		})
	}
	// Nothing was written for the rejected calls.
	keys, err := rc.Do(context.Background(), rc.B().Keys().Pattern(prefixOf(t, c)+":*").Build()).AsStrSlice()
	require.NoError(t, err, "keys after rejected calls: %v", keys)
	require.Empty(t, keys, "keys after rejected calls: %v", keys)
	require.Panics(t, func() { c.NewMutex("").Lock() }, "Lock with an empty name did not panic")
	// Releasing without an owner, or an owner that holds nothing.
	m := c.NewMutex("ok")
	require.ErrorIs(t, m.UnlockContext(context.Background()), dsync.ErrNotHeld, "unlock without owner")
	require.ErrorIs(t, m.UnlockContext(dsync.WithOwner(context.Background())), dsync.ErrNotHeld, "unlock by a stranger")
	// A fixed lease <= 0 means the watchdog.
	lctx, err := c.NewMutex("ok", dsync.WithLeaseTime(-time.Second)).LockContext(ctxT(t))
	require.NoError(t, err)
	pttl, _ := rc.Do(context.Background(), rc.B().Pttl().Key(prefixOf(t, c)+":{ok}:mutex").Build()).AsInt64()
	require.Greater(t, pttl, int64(0), "pttl")
	require.LessOrEqual(t, pttl, dsync.DefaultLease.Milliseconds(), "pttl")
	m.UnlockContext(lctx)
}

// Names are arbitrary bytes: braces, percent signs, spaces, binary and long
// names address distinct locks.
func TestMutexNames(t *testing.T) {
	c := newClient(t)
	names := []string{
		"plain", "with space", "{braces}", "}", "{", "%7D", "%", "%25", "a}b{c",
		"\x00\xff\x01binary", strings.Repeat("L", dsync.MaxNameLen), "ünïcødé",
	}
	var held []context.Context
	for _, n := range names {
		lctx, ok, err := c.NewMutex(n).TryLockContext(dsync.WithOwner(context.Background()))
		require.NoError(t, err, "name %q (names collided?)", n[:min(len(n), 20)])
		require.True(t, ok, "name %q (names collided?)", n[:min(len(n), 20)])
		held = append(held, lctx)
	}
	for i, n := range names {
		_, ok, _ := c.NewMutex(n).TryLockContext(context.Background())
		require.False(t, ok, "name %q acquired twice", n)
		require.NoError(t, c.NewMutex(n).UnlockContext(held[i]))
	}
}
