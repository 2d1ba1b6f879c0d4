package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// inspect shows a Group's key with its leader and the processes waiting,
// and a Cond's waiters in order.
func TestCLIInspectGroupAndCond(t *testing.T) {
	e := newEnv(t)
	c, c2 := e.client(), e.client()
	ctx := context.Background()
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	go dsync.NewGroup[int](c, "load").Do(ctx, "user:42", func(context.Context) (int, error) {
		close(started)
		<-release
		return 1, nil
	})
	<-started
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go dsync.NewGroup[int](c2, "load").Do(wctx, "user:42", func(context.Context) (int, error) { return 2, nil })
	m := c.NewMutex("jobs")
	lctx, err := m.LockContext(wctx)
	require.NoError(t, err)
	go c.NewCond(m).Wait(lctx)
	var out, errs string
	var code int
	waitFor(t, 5*time.Second, "a Group waiter", func() bool {
		code, out, errs = e.run(ctx, "inspect", "load")
		return code == 0 && strings.Contains(out, "waiting in 1 processes")
	})
	require.Contains(t, out, "group load\n  key user:42  result kept false\n  holder  ", "exit %d, out %q, err %q", code, out, errs)
	code, out, _ = e.run(ctx, "--json", "inspect", "load")
	require.Equal(t, 0, code)
	var js []jsonState
	require.NoError(t, json.Unmarshal([]byte(out), &js))
	require.Len(t, js, 1, "--json = %s", out)
	require.Equal(t, "user:42", js[0].Key, "--json = %s", out)
	require.Len(t, js[0].Waiters, 1, "--json = %s", out)
	waitFor(t, 5*time.Second, "a Cond waiter", func() bool {
		code, out, errs = e.run(ctx, "inspect", "jobs")
		return code == 0 && strings.Contains(out, "cond jobs\n  waiters 1, in order:\n    1. ")
	})
	require.NotContains(t, out, "cond jobs\n  free", "a Cond holds nothing")
}
