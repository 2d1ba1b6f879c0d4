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
// it holds the uncontended cycle's scripts, both variants, and no other.
func TestLibraryNamesCarryItsDigest(t *testing.T) {
	name, code := scripts.Library()
	require.True(t, strings.HasPrefix(code, "#!lua name="+name+"\n"), "library code does not start with its shebang: %.60q", code)
	for what, l := range map[string]*rueidis.Lua{
		"MutexAcquire":         scripts.MutexAcquire,
		"MutexRelease":         scripts.MutexRelease,
		"sharded MutexRelease": scripts.Sharded(scripts.MutexRelease),
	} {
		f, ok := scripts.Function(l)
		require.True(t, ok, "%s has no function", what)
		require.True(t, strings.HasPrefix(f, name+"_"), "%s: function %q not named after the library %q", what, f, name)
		require.Contains(t, code, "redis.register_function('"+f+"', ", "%s: function %q not registered", what, f)
	}
	_, ok := scripts.Function(scripts.MutexRenewMany)
	require.False(t, ok, "MutexRenewMany has a function: only the uncontended cycle's scripts are in the library")
}

// The functions answer as their scripts do: one acquire-release cycle,
// a re-entry and a release by another owner, run both ways on one server.
func TestFunctionsAnswerAsTheScripts(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	_, code := scripts.Library()
	require.NoError(t, rc.Do(ctx, rc.B().FunctionLoad().FunctionCode(code).Build()).Error())
	acqF, _ := scripts.Function(scripts.MutexAcquire)
	relF, _ := scripts.Function(scripts.MutexRelease)
	fcall := func(fnName string, keys, args []string) (string, error) {
		r := rc.Do(ctx, rc.B().Fcall().Function(fnName).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		return reply(r.ToMessage())
	}
	for _, way := range []string{"evalsha", "fcall"} {
		key := "p:{" + way + "}:mutex"
		acq := func(args ...string) string {
			var v string
			var err error
			if way == "fcall" {
				v, err = fcall(acqF, []string{key}, args)
			} else {
				v, err = reply(scripts.MutexAcquire.Exec(ctx, rc, []string{key}, args).ToMessage())
			}
			require.NoError(t, err)
			return v
		}
		rel := func(args ...string) string {
			var v string
			var err error
			if way == "fcall" {
				v, err = fcall(relF, []string{key}, args)
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
