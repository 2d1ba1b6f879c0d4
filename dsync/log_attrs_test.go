package dsync_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// logKinds is a slog.Handler that keeps the "kind" attribute of every
// record with one message, by the record's "name" attribute.
type logKinds struct {
	msg   string
	mu    *sync.Mutex
	kinds map[string][]string
}

func (h logKinds) Enabled(context.Context, slog.Level) bool { return true }
func (h logKinds) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h logKinds) WithGroup(string) slog.Handler            { return h }
func (h logKinds) Handle(_ context.Context, r slog.Record) error {
	if r.Message != h.msg {
		return nil
	}
	var kind, name string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "kind":
			kind = a.Value.String()
		case "name":
			name = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.kinds[name] = append(h.kinds[name], kind)
	h.mu.Unlock()
	return nil
}

func (h logKinds) of(name string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kinds[name]
}

// The "kind" attribute of a log record is spelled as the primitive's Kind
// constant ("mutex", "fair_mutex", ...), as in events, errors and Inspect,
// also in the records of the sync.Locker adapter, which used the Go type
// name ("Mutex", "FairMutex", ...) instead.
func TestLogKindIsKind(t *testing.T) {
	rec := logKinds{msg: "dsync: Unlock failed", mu: new(sync.Mutex), kinds: map[string][]string{}}
	c := newClient(t, dsync.WithLogger(slog.New(rec)))
	// A forced release told before the control subscription is confirmed
	// (and the check of the holds that follows it) names no holder.
	waitFor(t, 10*time.Second, "the control subscription", func() bool { return dsync.ForceSubscribed(c) })
	for _, tc := range []struct {
		name string
		kind dsync.Kind
		l    sync.Locker
	}{
		{"m", dsync.KindMutex, c.NewMutex("m")},
		{"f", dsync.KindFairMutex, c.NewFairMutex("f")},
		{"w", dsync.KindRWMutex, c.NewRWMutex("w")},
		{"r", dsync.KindRWMutex, c.NewRWMutex("r").RLocker()},
		{"s", dsync.KindSemaphore, c.NewSemaphore("s", 2).Locker(1)},
	} {
		tc.l.Lock()
		// ForceUnlockTell returns once the Client has ended the hold.
		_, told, err := c.ForceUnlockTell(ctxT(t), tc.name)
		require.NoError(t, err)
		require.Len(t, told, 1, "%s: the holder was not told", tc.name)
		tc.l.Unlock() // its hold is gone: the failed release is logged
		require.Equal(t, []string{string(tc.kind)}, rec.of(tc.name), "the kind logged for %q", tc.name)
	}
}
