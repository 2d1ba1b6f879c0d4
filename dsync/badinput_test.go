package dsync_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
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
				if !errors.Is(err, dsync.ErrInvalidArgument) {
					t.Fatalf("err = %v, want ErrInvalidArgument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		})
	}
	if _, err := dsync.NewClient(nil); !errors.Is(err, dsync.ErrInvalidArgument) {
		t.Fatalf("nil rueidis client: %v", err)
	}
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
			if _, err := m.LockContext(tc.ctx); !errors.Is(err, tc.want) {
				t.Fatalf("LockContext = %v, want %v", err, tc.want)
			}
			if _, _, err := m.TryLockContext(tc.ctx); !errors.Is(err, tc.want) {
				t.Fatalf("TryLockContext = %v, want %v", err, tc.want)
			}
			if err := m.UnlockContext(tc.ctx); !errors.Is(err, tc.want) {
				t.Fatalf("UnlockContext = %v, want %v", err, tc.want)
			}
			if tc.mu != "ok" && m.TryLock() {
				t.Fatal("TryLock succeeded")
			}
		})
	}
	// Nothing was written for the rejected calls.
	keys, err := rc.Do(context.Background(), rc.B().Keys().Pattern(prefixOf(t, c)+":*").Build()).AsStrSlice()
	if err != nil || len(keys) != 0 {
		t.Fatalf("keys after rejected calls: %v %v", keys, err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("Lock with an empty name did not panic")
			}
		}()
		c.NewMutex("").Lock()
	}()
	// Releasing without an owner, or an owner that holds nothing.
	m := c.NewMutex("ok")
	if err := m.UnlockContext(context.Background()); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("unlock without owner = %v", err)
	}
	if err := m.UnlockContext(dsync.WithOwner(context.Background())); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("unlock by a stranger = %v", err)
	}
	// A fixed lease <= 0 means the watchdog.
	lctx, err := c.NewMutex("ok", dsync.WithLeaseTime(-time.Second)).LockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	pttl, _ := rc.Do(context.Background(), rc.B().Pttl().Key(prefixOf(t, c)+":{ok}:mutex").Build()).AsInt64()
	if pttl <= 0 || pttl > dsync.DefaultLease.Milliseconds() {
		t.Fatalf("pttl %d, want the default lease", pttl)
	}
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
		if err != nil || !ok {
			t.Fatalf("name %q: %v %v (names collided?)", n[:min(len(n), 20)], ok, err)
		}
		held = append(held, lctx)
	}
	for i, n := range names {
		if _, ok, _ := c.NewMutex(n).TryLockContext(context.Background()); ok {
			t.Fatalf("name %q acquired twice", n)
		}
		if err := c.NewMutex(n).UnlockContext(held[i]); err != nil {
			t.Fatal(err)
		}
	}
}
