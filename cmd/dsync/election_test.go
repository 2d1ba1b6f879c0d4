package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An election shows as one: its leader with value and term, the
// candidates in line; list names it; unlock --force ends the term.
func TestCLIElection(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	el := c.NewElection("primary")
	lctx, err := el.Campaign(ctx, "10.0.0.7:5432")
	require.NoError(t, err)
	term, _ := dsync.FencingToken(lctx)
	cctx := dsync.WithOwner(ctx)
	next := make(chan error, 1)
	go func() {
		_, err := e.client().NewElection("primary").Campaign(cctx, "10.0.0.8:5432")
		next <- err
	}()
	waitFor(t, 5*time.Second, "the candidate to queue", func() bool {
		st, _ := c.Inspect(ctx, "primary")
		return len(st) == 1 && len(st[0].Waiters) == 1
	})

	code, out, errs := e.run(ctx, "inspect", "primary")
	require.Equal(t, 0, code, "exit %d: %s", code, errs)
	t.Logf("dsync inspect primary:\n%s", out)
	assert.True(t, strings.HasPrefix(out, "election primary\n"), "inspect:\n%s", out)
	assert.Contains(t, out, fmt.Sprintf("  leader  %s  term %d  since ", ownerOf(lctx), term), "inspect:\n%s", out)
	assert.Contains(t, out, "value 10.0.0.7:5432\n", "inspect:\n%s", out)
	assert.Contains(t, out, "1. "+ownerOf(cctx), "inspect:\n%s", out)

	code, out, errs = e.run(ctx, "inspect", "--json", "primary")
	require.Equal(t, 0, code, "exit %d: %s", code, errs)
	var js []jsonState
	require.NoError(t, json.Unmarshal([]byte(out), &js), "--json output %q", out)
	require.Len(t, js, 1, "--json = %s", out)
	require.NotNil(t, js[0].Leader, "--json = %s", out)
	assert.Equal(t, "10.0.0.7:5432", js[0].Leader.Value)
	assert.Equal(t, term, js[0].Leader.Term)
	assert.Len(t, js[0].Waiters, 1)

	code, out, _ = e.run(ctx, "list")
	require.Equal(t, 0, code)
	assert.Equal(t, "election   primary\n", out, "list")

	code, out, errs = e.run(ctx, "unlock", "--force", "--yes", "primary")
	require.Equal(t, 0, code, "unlock: exit %d, out %q, err %q", code, out, errs)
	assert.Contains(t, out, fmt.Sprintf("released election primary held by %s (token %d)", ownerOf(lctx), term))
	select {
	case err := <-next:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the candidate was not elected after the forced release")
	}
	l, err := el.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.8:5432", l.Value)
}
