package dsync

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sentRecorder is a rueidis client that records the commands sent through
// it and through the node clients its Nodes returns.
type sentRecorder struct {
	rueidis.Client
	mu   *sync.Mutex
	sent *[]string
}

func (r sentRecorder) note(cmds ...rueidis.Completed) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cmds {
		w := c.Commands()
		*r.sent = append(*r.sent, strings.Join(w[:min(2, len(w))], " "))
	}
}

func (r sentRecorder) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r.note(cmd)
	return r.Client.Do(ctx, cmd)
}

func (r sentRecorder) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	r.note(cmds...)
	return r.Client.DoMulti(ctx, cmds...)
}

func (r sentRecorder) Nodes() map[string]rueidis.Client {
	nodes := r.Client.Nodes()
	for a, n := range nodes {
		nodes[a] = sentRecorder{Client: n, mu: r.mu, sent: r.sent}
	}
	return nodes
}

// The preload loads the scripts on connections of its own, not on the one
// the Client's calls share: rueidis answers a lone caller on the caller's
// goroutine until two calls are in flight at once on a connection, and
// through its pipelining goroutines for good after (25 us more per serial
// Lock/Unlock cycle); the preload's loads, sent beside the caller's first
// calls, made that switch at once.
func TestPreloadLeavesSharedConnection(t *testing.T) {
	s := redistest.Start(t)
	var mu sync.Mutex
	var sent []string
	rc := sentRecorder{Client: s.Client(t), mu: &mu, sent: &sent}
	c, err := NewClient(rc)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	select {
	case <-c.preloaded:
	case <-time.After(10 * time.Second):
		t.Fatal("the preload did not end within 10 s")
	}
	// It ran: the function library and the scripts it does not run are on
	// the server.
	name, _ := scripts.Library(false)
	admin := s.Client(t)
	libs, err := admin.Do(context.Background(), admin.B().FunctionList().Libraryname(name).Build()).ToArray()
	require.NoError(t, err)
	assert.Len(t, libs, 1, "the function library %s is not loaded", name)
	loaded := 0
	for _, src := range scripts.Used(c.sharded) {
		if scripts.InLibrary(src, c.sharded) {
			continue
		}
		ok, err := admin.Do(context.Background(), admin.B().ScriptExists().Sha1(shaOf(src)).Build()).AsBoolSlice()
		require.NoError(t, err)
		require.Equal(t, []bool{true}, ok, "a script the preload should have loaded is not on the server")
		loaded++
	}
	require.Positive(t, loaded, "no script to check")
	mu.Lock()
	defer mu.Unlock()
	for _, cmd := range sent {
		assert.False(t, strings.HasPrefix(cmd, "SCRIPT LOAD") || strings.HasPrefix(cmd, "FUNCTION LOAD"),
			"the preload sent %q on the Client's shared connection", cmd)
	}
}

func shaOf(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}
