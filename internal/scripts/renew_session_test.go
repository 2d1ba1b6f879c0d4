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

// TestMutexRenewSession: the session's renewal batch, each case a hold
// of owner A, token 100 (131 with a block), sent as "<owner> <token> 1",
// in a batch of holds its Client believes unbound ("u") or bound ("b"),
// with the session key s42 there
// or not: which holds it binds (" s42" before a trailing " w", the TTL the
// backstop, 7/3 x lease), renews (a lease; a count above 1 keeps a longer
// TTL and loses a binding), reports gone (another owner or token, a free
// marker, no key, bound to another session) or flipped (bound after the
// call, in a "u" batch; not bound, in a "b" one).
func TestMutexRenewSession(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	const leaseMS = 5000
	type tc struct {
		name    string
		batch   string // "u" or "b"
		live    bool   // the session key exists
		value   string // "": no key
		ttl     int64  // its TTL in ms
		want    string // the value after ("": no key)
		ttlWant string // "lease" (2 s, lease], "backstop" (2 x lease, 7/3 x lease], "kept" (the 600 s it had)
		gone    bool
		flipped bool
	}
	const long = 600000
	cases := []tc{
		{"unbound, binds", "u", true, "A 100 1", leaseMS, "A 100 1 s42", "backstop", false, true},
		{"unbound, waiter's mark last", "u", true, "A 100 1 w", leaseMS, "A 100 1 s42 w", "backstop", false, true},
		{"unbound, block and waiter", "u", true, "A 131 1 b w", leaseMS, "A 131 1 b s42 w", "backstop", false, true},
		{"unbound, no session: renewed", "u", false, "A 100 1", 1000, "A 100 1", "lease", false, false},
		{"already bound to it (handed on inside the Client)", "u", true, "A 100 1 s42", long, "A 100 1 s42", "backstop", false, true},
		{"bound to another session", "u", true, "A 100 1 s7", long, "A 100 1 s7", "kept", true, false},
		{"re-entered, short TTL", "u", true, "A 100 2", 1000, "A 100 2", "lease", false, false},
		{"re-entered, long TTL kept", "u", true, "A 100 2", long, "A 100 2", "kept", false, false},
		{"re-entered, binding dropped", "u", true, "A 100 2 s42 w", long, "A 100 2 w", "kept", false, false},
		{"another owner", "u", true, "B 100 1", long, "B 100 1", "kept", true, false},
		{"another token", "u", true, "A 101 1", long, "A 101 1", "kept", true, false},
		{"free marker", "u", true, "- 100 0", long, "- 100 0", "kept", true, false},
		{"no key", "u", true, "", 0, "", "", true, false},
		{"bound: the common case", "b", true, "A 100 1 s42", long, "A 100 1 s42", "backstop", false, false},
		{"bound, waiter's mark", "b", true, "A 100 1 s42 w", long, "A 100 1 s42 w", "backstop", false, false},
		{"bound, session gone (written anyway: the PEXPIRE decides)", "b", false, "A 100 1 s42", long, "A 100 1 s42", "backstop", false, false},
		{"believed bound, not: binds", "b", true, "A 100 1", leaseMS, "A 100 1 s42", "backstop", false, false},
		{"believed bound, not, no session", "b", false, "A 100 1", 1000, "A 100 1", "lease", false, true},
		{"believed bound, re-entered", "b", true, "A 100 2", long, "A 100 2", "kept", false, true},
		{"believed bound, bound to another session", "b", true, "A 100 1 s7", long, "A 100 1 s7", "kept", true, false},
		{"believed bound, gone", "b", true, "", 0, "", "", true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sess := "p:s:42"
			key := "p:{" + c.name + "}:mutex"
			require.NoError(t, rc.Do(ctx, rc.B().Del().Key(key, sess).Build()).Error())
			if c.live {
				require.NoError(t, rc.Do(ctx, rc.B().Set().Key(sess).Value("1").PxMilliseconds(leaseMS).Build()).Error())
			}
			if c.value != "" {
				require.NoError(t, rc.Do(ctx, rc.B().Set().Key(key).Value(c.value).PxMilliseconds(c.ttl).Build()).Error())
			}
			tok := "100"
			if c.value != "" && c.value[2:5] == "131" {
				tok = "131"
			}
			arg := "A " + tok + " 1"
			// The hold in the middle of a batch of three (the others bound
			// and unchanged), so that its number is 2.
			other := func(i int) string { return fmt.Sprintf("p:{other%d}:mutex", i) }
			for i := range 2 {
				v := "C 5 1"
				if c.batch == "b" {
					v = "C 5 1 s42"
				}
				require.NoError(t, rc.Do(ctx, rc.B().Set().Key(other(i)).Value(v).PxMilliseconds(long).Build()).Error())
			}
			oarg := "C 5 1"
			r, err := scripts.MutexRenewSession.Exec(ctx, rc, []string{sess, other(0), key, other(1)},
				[]string{strconv.Itoa(leaseMS), "42", c.batch, oarg, arg, oarg}).ToArray()
			require.NoError(t, err)
			require.Len(t, r, 2)
			gone, err := r[0].AsIntSlice()
			require.NoError(t, err)
			flipped, err := r[1].AsIntSlice()
			require.NoError(t, err)
			wantGone, wantFlipped := []int64{}, []int64{}
			if c.gone {
				wantGone = []int64{2}
			}
			if c.flipped {
				wantFlipped = []int64{2}
			}
			if c.batch == "u" && c.live {
				// The others, "C 5 1" in a "u" batch, were bound.
				wantFlipped = append([]int64{1}, append(wantFlipped, 3)...)
			}
			require.Equal(t, wantGone, gone, "gone")
			require.Equal(t, wantFlipped, flipped, "flipped")
			v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
			require.Equal(t, c.want, v)
			if c.want == "" {
				return
			}
			pttl, err := rc.Do(ctx, rc.B().Pttl().Key(key).Build()).AsInt64()
			require.NoError(t, err)
			got := "kept" // more than the backstop
			switch {
			case pttl > 7*leaseMS/3:
			case pttl > 2*leaseMS:
				got = "backstop"
			case pttl > leaseMS:
				got = "between" // more than a lease, less than the backstop
			case pttl > 2000:
				got = "lease"
			default:
				got = "short" // as it was (1 s): not renewed
			}
			require.Equal(t, c.ttlWant, got, "TTL %d ms", pttl)
		})
	}
}

// TestMutexHandoffUnbinds: a handoff through Redis to another owner of the
// Client drops the value's binding to the session (the new hold binds at
// its own first renewal) and keeps the waiter's mark last; the new hold's
// TTL is its lease, not the backstop.
func TestMutexHandoffUnbinds(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key, ch := "p:{h}:mutex", "p:{h}:mutex:ch"
	require.NoError(t, rc.Do(ctx, rc.B().Set().Key("p:s:42").Value("1").PxMilliseconds(5000).Build()).Error())
	require.NoError(t, rc.Do(ctx, rc.B().Set().Key(key).Value("B 100 1 s42 w").PxMilliseconds(600000).Build()).Error())
	r := ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"B", "100", "C", "5000", "-1", "60000", "1"}))
	require.Equal(t, int64(1), r[0], "handoff = %v", r)
	v, err := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "C "+strconv.FormatInt(r[1], 10)+" 1 w", v)
	pttl := num(t, rc.Do(ctx, rc.B().Pttl().Key(key).Build()))
	require.LessOrEqual(t, pttl, int64(5000))
}
