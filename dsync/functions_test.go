package dsync_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// cycles runs n uncontended LockContext/UnlockContext cycles of m.
func cycles(t *testing.T, m *dsync.Mutex, n int) {
	t.Helper()
	for range n {
		lctx, err := m.LockContext(ctxT(t))
		require.NoError(t, err)
		require.NoError(t, m.UnlockContext(lctx))
	}
}

// scriptStats are a server's FCALL and EVALSHA/EVAL calls run since its
// last CONFIG RESETSTAT (rejected calls are not counted).
func scriptStats(t *testing.T, s *redistest.Server) (fcalls, evals int) {
	t.Helper()
	// A client of this node alone: on a cluster node rueidis would make a
	// cluster client, which sends INFO to any node.
	rc := s.Client(t, func(o *rueidis.ClientOption) { o.ForceSingleClient = true })
	info, err := rc.Do(ctxT(t), rc.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	return statCalls(info, "fcall"), statCalls(info, "evalsha") + statCalls(info, "eval")
}

// The uncontended cycle runs as functions where the server allows them:
// its acquire and its release are FCALLs of the library the Client
// loaded, no EVALSHA. After FUNCTION FLUSH the next call loads it again.
func TestMutexCycleRunsAsFunctions(t *testing.T) {
	s := redistest.Start(t)
	c := newClientOn(t, s.Client(t))
	<-dsync.Preloaded(c)
	name, _ := scripts.Library(false)
	m := c.NewMutex("f")
	require.NoError(t, s.Do(t, "CONFIG", "RESETSTAT").Error())
	cycles(t, m, 10)
	fcalls, evals := scriptStats(t, s)
	require.Equal(t, 20, fcalls, "FCALLs of 10 cycles")
	require.Zero(t, evals, "EVALSHA or EVAL in 10 cycles")

	require.NoError(t, s.Do(t, "FUNCTION", "FLUSH").Error())
	list, err := s.Do(t, "FUNCTION", "LIST", "LIBRARYNAME", name).ToArray()
	require.NoError(t, err)
	require.Empty(t, list, "the library after FUNCTION FLUSH")
	require.NoError(t, s.Do(t, "CONFIG", "RESETSTAT").Error())
	cycles(t, m, 10)
	list, err = s.Do(t, "FUNCTION", "LIST", "LIBRARYNAME", name).ToArray()
	require.NoError(t, err)
	require.Len(t, list, 1, "the library loaded again after FUNCTION FLUSH")
	fcalls, evals = scriptStats(t, s)
	require.Equal(t, 21, fcalls, "FCALLs of 10 cycles after the flush: the first found no function, then ran again")
	require.Zero(t, evals, "EVALSHA or EVAL after the flush")
}

// Where the server refuses functions to the Client's user (an ACL without
// FUNCTION, or without FCALL) the cycle runs as EVALSHA, each call once.
func TestMutexCycleWithoutFunctions(t *testing.T) {
	for _, tc := range []struct{ name, deny string }{
		{"no FUNCTION", "-function"},
		{"no FCALL", "-fcall"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			require.NoError(t, s.Do(t, "ACL", "SETUSER", "u", "on", ">pw", "~*", "&*", "+@all", tc.deny).Error())
			c := newClientOn(t, s.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password = "u", "pw" }))
			<-dsync.Preloaded(c)
			m := c.NewMutex("f")
			cycles(t, m, 1) // (an FCALL refused once, before the Client knows)
			require.NoError(t, s.Do(t, "CONFIG", "RESETSTAT").Error())
			cycles(t, m, 10)
			fcalls, evals := scriptStats(t, s)
			require.Zero(t, fcalls, "FCALLs run for a user refused functions")
			require.Equal(t, 20, evals, "EVALSHA calls of 10 cycles")
			info, err := s.Do(t, "INFO", "commandstats").ToString()
			require.NoError(t, err)
			require.False(t, strings.Contains(info, "cmdstat_fcall:"), "FCALL tried again after the refusal: %s", info)
		})
	}
}

// On a Cluster each master runs the cycle of its names as functions: the
// library is loaded on every node, the sharded pub/sub mode's.
func TestClusterMutexCycleRunsAsFunctions(t *testing.T) {
	prefix := testPrefix(t)
	cl := cluster(t)
	c := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	<-dsync.Preloaded(c)
	sharded, _ := scripts.Library(true)
	for _, name := range namesOnMasters(t, prefix) {
		master, _, err := cl.MasterOf(prefix + ":{" + name + "}:mutex")
		require.NoError(t, err)
		list, err := master.Do(t, "FUNCTION", "LIST", "LIBRARYNAME", sharded).ToArray()
		require.NoError(t, err)
		require.Len(t, list, 1, "the sharded library %s on master %s", sharded, master.Addr)
		f0, e0 := scriptStats(t, master)
		cycles(t, c.NewMutex(name), 10)
		f1, e1 := scriptStats(t, master)
		require.Equal(t, 20, f1-f0, "FCALLs of 10 cycles of %q on master %s", name, master.Addr)
		require.Zero(t, e1-e0, "EVALSHA or EVAL of 10 cycles of %q on master %s", name, master.Addr)
	}
}

// The acquire script's one-argument form takes dsync's default lease.
func TestAcquireScriptDefaultLease(t *testing.T) {
	src := scripts.Source(scripts.MutexAcquire)
	want := "local lease = ARGV[2] or '" + strconv.FormatInt(dsync.DefaultLease.Milliseconds(), 10) + "'\n"
	require.Contains(t, src, want, "mutex_acquire.lua's default lease is not DefaultLease")
}

// A wait's first attempt by a fresh owner, uncontended, at the default
// lease, sends the owner alone; the lock's TTL is the default lease, and a
// wait that finds the lock held registers under its Client's ident, as
// with the arguments spelled out.
func TestAcquireOneArgument(t *testing.T) {
	s := redistest.Start(t)
	c := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("p"))
	<-dsync.Preloaded(c)
	// A Client's first acquisition tells it the server clock, which the
	// owners of its later ones carry their deadline by (srvclock.go).
	warm := func(c *dsync.Client) {
		l, err := c.NewMutex("warm").LockContext(ctxT(t))
		require.NoError(t, err)
		require.NoError(t, c.NewMutex("warm").UnlockContext(l))
	}
	warm(c)
	m := c.NewMutex("one")
	// The slow log, set to log every command, shows each command's
	// arguments.
	require.NoError(t, s.Do(t, "CONFIG", "SET", "slowlog-log-slower-than", "0").Error())
	require.NoError(t, s.Do(t, "SLOWLOG", "RESET").Error())
	lctx, err := m.LockContext(ctxT(t))
	require.NoError(t, err)
	acquire, _ := scripts.Function(scripts.MutexAcquire, false)
	entries, err := s.Do(t, "SLOWLOG", "GET", "-1").ToArray()
	require.NoError(t, err)
	var sent [][]string
	for _, e := range entries {
		fields, err := e.ToArray()
		require.NoError(t, err)
		argv, err := fields[3].AsStrSlice()
		require.NoError(t, err)
		if len(argv) > 1 && argv[1] == acquire {
			sent = append(sent, argv)
		}
	}
	require.Len(t, sent, 1, "FCALLs of the acquire function (slow log: %v)", entries)
	require.Len(t, sent[0], 5, "FCALL <function> 1 <key> <owner>: the owner alone, got %q", sent[0])
	pttl, err := s.Do(t, "PTTL", "p:{one}:mutex").AsInt64()
	require.NoError(t, err)
	require.InDelta(t, dsync.DefaultLease.Milliseconds(), pttl, 2000, "the lock's TTL")
	// Held: another Client's wait registers in the waiting count, under
	// its ident, taken from its owner.
	c2 := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("p"), dsync.WithClientName("second"))
	<-dsync.Preloaded(c2)
	warm(c2)
	wctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { _, err := c2.NewMutex("one").LockContext(wctx); done <- err }()
	waitFor(t, 10*time.Second, "the second Client's wait to register", func() bool {
		fields, err := s.Do(t, "HKEYS", "p:{one}:mutex:waiting").AsStrSlice()
		return err == nil && len(fields) == 1 && strings.HasPrefix(fields[0], "second/")
	})
	cancel()
	require.Error(t, <-done)
	require.NoError(t, m.UnlockContext(lctx))
}
