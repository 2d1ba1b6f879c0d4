package dsync

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A read-only command that went through sharedDial is not recycled when
// its reply comes (pinResent): rueidis may have sent it again after a
// connection broke under it, and that connection's writer may still be
// reading it. A recycled command's words are cleared for the next Build.
func TestResentCommandIsNotRecycled(t *testing.T) {
	s := redistest.Start(t)
	d := sharedDial{Client: s.Client(t)}
	ctx := context.Background()
	one := d.B().Hgetall().Key("h").Build()
	require.NoError(t, d.Do(ctx, one).Error())
	assert.Equal(t, []string{"HGETALL", "h"}, one.Commands(), "Do recycled a read-only command")
	get, lr := d.B().Get().Key("k").Build(), d.B().Lrange().Key("l").Start(0).Stop(-1).Build()
	for _, r := range d.DoMulti(ctx, get, lr) {
		require.NoError(t, r.NonRedisError())
	}
	assert.Equal(t, []string{"GET", "k"}, get.Commands(), "DoMulti recycled a read-only command")
	assert.Equal(t, []string{"LRANGE", "l", "0", "-1"}, lr.Commands(), "DoMulti recycled a read-only command")
}

// A node's client from sharedDial.Nodes does not recycle a retryable
// command either: rueidis' Lua.ExecMulti sends its SCRIPT LOAD (which
// rueidis marks retryable) through them.
func TestNodeResentCommandIsNotRecycled(t *testing.T) {
	s := redistest.Start(t)
	d := sharedDial{Client: s.Client(t)}
	nodes := d.Nodes()
	require.NotEmpty(t, nodes)
	for addr, n := range nodes {
		load := n.B().ScriptLoad().Script("return 1").Build().ToRetryable()
		require.NoError(t, n.Do(context.Background(), load).Error())
		assert.Equal(t, []string{"SCRIPT", "LOAD", "return 1"}, load.Commands(), "node %s recycled a retryable command", addr)
	}
}

// The race the soak of 718699e found, on demand: read-only commands (which
// rueidis sends again after a connection breaks) and writes through
// sharedDial while every connection is killed again and again. Under the
// race detector, a command recycled after the broken connection's writer
// read it is a reported data race (it was, within seconds, before
// pinResent).
func TestCommandsUnderConnectionKills(t *testing.T) {
	s := redistest.Start(t)
	d := sharedDial{Client: s.Client(t)}
	admin := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var replies atomic.Int64
	got := make(chan struct{}, 1) // a reply came since the last kill
	replied := func() {
		replies.Add(1)
		select {
		case got <- struct{}{}:
		default:
		}
	}
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if g%2 == 0 {
					rs := d.DoMulti(ctx, d.B().Hgetall().Key("h").Build(), d.B().Lrange().Key("l").Start(0).Stop(-1).Build())
					if rs[0].NonRedisError() == nil {
						replied()
					}
				} else if d.Do(ctx, d.B().Set().Key("k").Value("v").Build()).NonRedisError() == nil {
					replied()
				}
			}
		}()
	}
	var kills int64
	for ctx.Err() == nil {
		n, err := admin.Do(context.Background(), admin.B().Arbitrary("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Build()).AsInt64()
		require.NoError(t, err)
		kills += n
		// Between kills the commands get through on new connections.
		select {
		case <-got:
		case <-ctx.Done():
		}
	}
	wg.Wait()
	t.Logf("%d connections killed, %d replies", kills, replies.Load())
	assert.Positive(t, kills, "no connection was killed")
	assert.Positive(t, replies.Load(), "no command got a reply")
}
