package scripts_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/stretchr/testify/require"
)

// TestMutexReleaseManyAsRelease: MutexReleaseMany (Close's batch release)
// does, hold by hold, what MutexRelease does for a known hold: the same
// reply, the same value left (TTL kept), and a wakeup published exactly
// when MutexRelease publishes one, for every case of mutex_release.lua, all
// in one call.
func TestMutexReleaseManyAsRelease(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	type tc struct {
		name  string
		value string // "" : no key
		hold  string // "<owner> <token> "
		used  string // "" : the token
	}
	cases := []tc{
		{"common", "A 100 1", "A 100 ", ""},
		{"waiter's mark", "A 100 1 w", "A 100 ", ""},
		{"block, used below its end", "A 131 1 b", "A 131 ", "102"},
		{"block and waiter, used", "A 131 1 b w", "A 131 ", "102"},
		{"re-entered through another Client", "A 100 2 w", "A 100 ", ""},
		{"our earlier release", "- 100 0", "A 100 ", ""},
		{"our earlier release, used", "- 102 0", "A 131 ", "102"},
		{"another owner", "B 200 1 w", "A 100 ", ""},
		{"another token of the owner", "A 101 1", "A 100 ", ""},
		{"another's free marker", "- 99 0", "A 100 ", ""},
		{"gone", "", "A 100 ", ""},
		{"another layout", "x", "A 100 ", ""},
	}
	type result struct {
		code  int64
		value string
		ttl   bool
		pubs  int
	}
	set := func(key, v string) {
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(key).Build()).Error())
		if v != "" {
			require.NoError(t, rc.Do(ctx, rc.B().Set().Key(key).Value(v).PxMilliseconds(60000).Build()).Error())
		}
	}
	after := func(key string, code int64, pubs int) result {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		pttl, err := rc.Do(ctx, rc.B().Pttl().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		return result{code, v, pttl > 0, pubs}
	}
	// One at a time with MutexRelease.
	want := make([]result, len(cases))
	for i, c := range cases {
		key := fmt.Sprintf("p:{one%d}:mutex", i)
		set(key, c.value)
		args := []string{c.hold + "1"} // MutexRelease's form: the value
		if c.used != "" {
			args = append(args, c.used)
		}
		var code int64
		pubs := commands(t, rc, func() {
			code = num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key}, args))
		})["publish"]
		want[i] = after(key, code, pubs)
	}
	// All in one MutexReleaseMany call.
	keys := make([]string, len(cases))
	var args []string
	for i, c := range cases {
		keys[i] = fmt.Sprintf("p:{many%d}:mutex", i)
		set(keys[i], c.value)
		args = append(args, c.hold, c.used)
	}
	var codes []int64
	pubs := commands(t, rc, func() {
		codes = ints(t, scripts.MutexReleaseMany.Exec(ctx, rc, keys, args))
	})["publish"]
	require.Len(t, codes, len(cases))
	total := 0
	for i, c := range cases {
		got := after(keys[i], codes[i], want[i].pubs) // publishes: checked in total below
		require.Equal(t, want[i], got, "case %q", c.name)
		total += want[i].pubs
	}
	require.Equal(t, total, pubs, "wakeups published")
	require.Equal(t, 2, total, "the two last counts with a waiter's mark publish")
}
