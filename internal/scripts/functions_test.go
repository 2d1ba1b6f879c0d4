package scripts_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// The library names each function after its own version: a change of any
// script's code is a new library, never a new body under an old name; and
// it holds the uncontended cycle's scripts of its pub/sub mode, and no
// other: not the other mode's release, whose code would cost every call a
// share of the collector's walk of the functions' heap.
func TestLibraryNamesCarryItsDigest(t *testing.T) {
	classic, _ := scripts.Library(false)
	sharded, _ := scripts.Library(true)
	require.NotEqual(t, classic, sharded, "the two pub/sub modes' libraries have one name")
	for _, mode := range []bool{false, true} {
		name, code := scripts.Library(mode)
		require.True(t, strings.HasPrefix(code, "#!lua name="+name+"\n"), "library code does not start with its shebang: %.60q", code)
		release, other := scripts.MutexRelease, scripts.Sharded(scripts.MutexRelease)
		if mode {
			release, other = other, release
		}
		require.NotSame(t, release, other, "MutexRelease has no sharded variant")
		for what, l := range map[string]*rueidis.Lua{
			"MutexAcquire": scripts.MutexAcquire,
			"MutexRelease": release,
		} {
			f, ok := scripts.Function(l, mode)
			require.True(t, ok, "sharded %v: %s has no function", mode, what)
			require.True(t, strings.HasPrefix(f, name+"_"), "%s: function %q not named after the library %q", what, f, name)
			require.Contains(t, code, "redis.register_function('"+f+"', ", "%s: function %q not registered", what, f)
		}
		_, ok := scripts.Function(other, mode)
		require.False(t, ok, "sharded %v: the other pub/sub mode's release has a function", mode)
		require.Equal(t, 2, strings.Count(code, "redis.register_function("), "sharded %v: functions registered", mode)
		_, ok = scripts.Function(scripts.MutexRenewMany, mode)
		require.False(t, ok, "MutexRenewMany has a function: only the uncontended cycle's scripts are in the library")

		// lib.lua's functions are defined once, at the library's top,
		// before the functions that share them: not in each function's
		// body, where every call past a common case would make them
		// again. Those of the sharded library publish with SPUBLISH.
		first := strings.Index(code, "\nlocal function mutex_")
		require.Positive(t, first, "sharded %v: no function of the library's own", mode)
		for _, f := range []string{"server_now", "fmt", "next_token", "lock_parse", "lock_release_one", "lock_orphaned", "lock_grant"} {
			def := "\nlocal function " + f + "("
			require.Equal(t, 1, strings.Count(code, def), "sharded %v: definitions of lib.lua's %s", mode, f)
			require.Less(t, strings.Index(code, def), first, "sharded %v: lib.lua's %s is not at the library's top", mode, f)
		}
		classicCall, shardedCall := "redis.call('publish',", "redis.call('spublish',"
		if mode {
			classicCall, shardedCall = shardedCall, classicCall
		}
		require.NotContains(t, code, shardedCall, "sharded %v: the other pub/sub mode's publish", mode)
		require.Contains(t, code[:first], classicCall, "sharded %v: lib.lua's grant at the top publishes in its mode", mode)
	}
}

// The functions answer as their scripts do: one acquire-release cycle,
// a re-entry and a release by another owner, run as scripts and as each
// pub/sub mode's functions on one server.
func TestFunctionsAnswerAsTheScripts(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	// Both pub/sub modes' libraries, side by side on one server: each way
	// runs the cycle as scripts (fn empty) or as a library's functions
	// (acquire, release).
	type way struct {
		name string
		fn   [2]string
	}
	ways := []way{{name: "evalsha"}}
	for _, mode := range []bool{false, true} {
		_, code := scripts.Library(mode)
		require.NoError(t, rc.Do(ctx, rc.B().FunctionLoad().FunctionCode(code).Build()).Error())
		release := scripts.MutexRelease
		if mode {
			release = scripts.Sharded(release)
		}
		acq, ok1 := scripts.Function(scripts.MutexAcquire, mode)
		rel, ok2 := scripts.Function(release, mode)
		require.True(t, ok1 && ok2, "sharded %v: the cycle's functions", mode)
		ways = append(ways, way{fmt.Sprint("fcall sharded ", mode), [2]string{acq, rel}})
	}
	fcall := func(fnName string, keys, args []string) (string, error) {
		r := rc.Do(ctx, rc.B().Fcall().Function(fnName).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		return reply(r.ToMessage())
	}
	for _, w := range ways {
		way, f, fc := w.name, w.fn, w.fn[0] != ""
		key := "p:{" + way + "}:mutex"
		acq := func(args ...string) string {
			var v string
			var err error
			if fc {
				v, err = fcall(f[0], []string{key}, args)
			} else {
				v, err = reply(scripts.MutexAcquire.Exec(ctx, rc, []string{key}, args).ToMessage())
			}
			require.NoError(t, err)
			return v
		}
		rel := func(args ...string) string {
			var v string
			var err error
			if fc {
				v, err = fcall(f[1], []string{key}, args)
			} else {
				v, err = reply(scripts.MutexRelease.Exec(ctx, rc, []string{key}, args).ToMessage())
			}
			require.NoError(t, err)
			return v
		}
		tok := acq("A", "10000")
		require.NotContains(t, tok, "[", "%s: acquire of a free lock = %s, want a bare token", way, tok)
		require.Equal(t, "[2 "+tok+"]", acq("A", "10000"), "%s: re-entry", way)
		require.Equal(t, "0", rel("B "+tok+" 1"), "%s: release by another owner", way)
		require.Equal(t, "2", rel("A "+tok+" 1"), "%s: first release of two", way)
		require.Equal(t, "1", rel("A "+tok+" 1"), "%s: last release", way)

		// The one-hop grant (lib.lua's lock_grant, at the library's top
		// for functions): E holds, F waits, E's release makes F the
		// holder with a new token.
		tok = acq("E-0000000", "10000", "client-e", "1", "0")
		require.NotContains(t, tok, "[", "%s: E's acquire = %s", way, tok)
		require.True(t, strings.HasPrefix(acq("F-0000001", "10000", "client-f", "1", "0"), "[0 "), "%s: F waits", way)
		require.Equal(t, "1", rel("E-0000000 "+tok+" 1"), "%s: E's release", way)
		v, err := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		require.NoError(t, err)
		require.Regexp(t, `^F-0000001 \d+ 1 g$`, v, "%s: granted to F", way)
		granted, err := strconv.ParseInt(strings.Fields(v)[1], 10, 64)
		require.NoError(t, err)
		e, err := strconv.ParseInt(tok, 10, 64)
		require.NoError(t, err)
		require.Greater(t, granted, e, "%s: the grant's token", way)
	}
}

// reply spells an integer reply, or an array of integers as "[a b]".
func reply(m rueidis.RedisMessage, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if m.IsInt64() {
		n, err := m.AsInt64()
		return strconv.FormatInt(n, 10), err
	}
	v, err := m.AsIntSlice()
	if err != nil {
		return "", err
	}
	return fmt.Sprint(v), nil
}
