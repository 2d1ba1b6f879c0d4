package scripts_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/stretchr/testify/require"
)

// TestMutexRenewManyAsRenew: MutexRenewMany (the renewal loop's batch),
// given each hold as "<owner> <token> 1", renews exactly the holds
// MutexRenew renews given their prefix "<owner> <token> ": the hold is
// renewed if and only if its value starts with that prefix, whatever the
// count and flags (the common value, compared whole, and every other one),
// but for a hold bound to a session with a count of 1 (its Client renews
// it through the session); a count above 1 keeps a TTL longer than the
// lease; every other value (another owner or token, one whose digits
// extend the token or the count's, a free marker, another layout, no key)
// is left with its TTL and reported gone, all in one call.
func TestMutexRenewManyAsRenew(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	type tc struct {
		name  string
		value string // "": no key
		hold  string // "<owner> <token> "
	}
	cases := []tc{
		{"common", "A 100 1", "A 100 "},
		{"waiter's mark", "A 100 1 w", "A 100 "},
		{"block", "A 131 1 b", "A 131 "},
		{"block and waiter", "A 131 1 b w", "A 131 "},
		{"re-entered through another Client", "A 100 2", "A 100 "},
		{"re-entered, waiter", "A 100 3 w", "A 100 "},
		{"count starting with 1", "A 100 12", "A 100 "},
		{"FairMutex layout", "A 100 1 w7 5", "A 100 "},
		{"FairMutex layout, re-entered", "A 100 2 w7 5", "A 100 "},
		{"another token of the owner", "A 101 1", "A 100 "},
		{"a token extending ours", "A 1001 1", "A 100 "},
		{"a token extending ours and the count", "A 100 1 1", "A 10 "},
		{"an owner extending ours", "AB 100 1", "A 100 "},
		{"another owner", "B 100 1 w", "A 100 "},
		{"our free marker", "- 100 0", "A 100 "},
		{"another layout", "x", "A 100 "},
		{"prefix only", "A 100 ", "A 100 "},
		{"bound to a session", "A 100 1 s42", "A 100 "},
		{"bound, block and waiter", "A 131 1 b s42 w", "A 131 "},
		{"bound, re-entered by an old Client", "A 100 2 s42", "A 100 "},
		{"gone", "", "A 100 "},
	}
	const leaseMS, ttlMS = 5000, 600000
	set := func(key, v string) {
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(key).Build()).Error())
		if v != "" {
			require.NoError(t, rc.Do(ctx, rc.B().Set().Key(key).Value(v).PxMilliseconds(ttlMS).Build()).Error())
		}
	}
	type result struct {
		renewed bool
		value   string
		pttl    string // "lease", "kept", "none"
	}
	after := func(key string, renewed bool) result {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		pttl, err := rc.Do(ctx, rc.B().Pttl().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		r := result{renewed: renewed, value: v, pttl: "none"}
		switch {
		case pttl > leaseMS*2:
			r.pttl = "kept"
		case pttl > 0:
			r.pttl = "lease"
		}
		return r
	}
	// One at a time with MutexRenew, the reference.
	want := make([]result, len(cases))
	renewed := 0
	for i, c := range cases {
		key := fmt.Sprintf("p:{one%d}:mutex", i)
		set(key, c.value)
		code := num(t, scripts.MutexRenew.Exec(ctx, rc, []string{key}, []string{c.hold, strconv.Itoa(leaseMS)}))
		want[i] = after(key, code == 1)
		if code == 1 {
			renewed++
		}
	}
	require.Equal(t, 11, renewed, "holds MutexRenew renews")
	// All in one MutexRenewMany call, each hold as "<owner> <token> 1".
	keys := make([]string, len(cases))
	args := []string{strconv.Itoa(leaseMS)}
	for i, c := range cases {
		keys[i] = fmt.Sprintf("p:{many%d}:mutex", i)
		set(keys[i], c.value)
		args = append(args, c.hold+"1")
	}
	gone := ints(t, scripts.MutexRenewMany.Exec(ctx, rc, keys, args))
	isGone := map[int]bool{}
	for _, k := range gone {
		isGone[int(k)] = true
	}
	require.Len(t, isGone, len(gone), "holds reported gone twice: %v", gone)
	for i, c := range cases {
		require.Equal(t, want[i], after(keys[i], !isGone[i+1]), "case %q", c.name)
	}
}
