package dsync_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["candidate"] = childCandidate
	childRoles["observer"] = childObserver
}

// electionKey is a key of election name; part is "fair:queue" for its
// line of candidates or "election:ch" for its change channel.
func electionKey(prefix, name, part string) string {
	return prefix + ":{\x00election:" + name + "}:" + part
}

func electionChannel(prefix, name string) string {
	return electionKey(prefix, name, "election:ch")
}

// llen is the number of candidates in line for election name of c.
func llen(t testing.TB, c *dsync.Client, name string) int {
	t.Helper()
	rc := newRueidis(t)
	n, err := rc.Do(context.Background(), rc.B().Llen().Key(electionKey(prefixOf(t, c), name, "fair:queue")).Build()).AsInt64()
	require.NoError(t, err)
	return int(n)
}

// childCandidate campaigns in election DSYNC_TEST_NAME with value
// DSYNC_TEST_VALUE and leads until killed.
func childCandidate(c *dsync.Client, _ rueidis.Client, _ string) int {
	e := c.NewElection(os.Getenv("DSYNC_TEST_NAME"))
	if _, err := e.Campaign(context.Background(), os.Getenv("DSYNC_TEST_VALUE")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {}
}

// childObserver prints every state Observe delivers for election
// DSYNC_TEST_NAME, one a line: "<value> <term>", or "none", then "@"
// and the wall clock (unix ns) when it was delivered.
func childObserver(c *dsync.Client, _ rueidis.Client, _ string) int {
	e := c.NewElection(os.Getenv("DSYNC_TEST_NAME"))
	for l := range e.Observe(context.Background()) {
		at := time.Now().UnixNano()
		if l.Term == 0 {
			fmt.Printf("none @%d\n", at)
		} else {
			fmt.Printf("%s %d @%d\n", l.Value, l.Term, at)
		}
	}
	return 1
}

// Three processes campaign; the leader is SIGKILLed twice. Each time an
// observer in a fourth process sees the loss and then the next candidate
// in line as the new leader within the lease of the kill, by its own
// clock. The dead leader's term lasts what its lease had left at the
// kill, up to a whole lease just after a renewal: the kill comes when
// the lease has 100 ms to lease/3 + 50 ms less than a whole one left (at
// least 100 ms since a renewal, 50 ms before the next), so that the
// bound leaves the failover itself 100 ms or more, and the failover is
// also checked against what the lease had left (+ 100 ms).
func TestElectionFailoverProcesses(t *testing.T) {
	const lease = time.Second
	c := newClient(t, dsync.WithLease(lease))
	prefix := prefixOf(t, c)
	e := c.NewElection("failover")
	env := []string{"DSYNC_TEST_NAME=failover", "DSYNC_TEST_LEASE=" + lease.String()}

	obs := startChild(t, "observer", prefix, env...)
	out, err := obs.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, obs.Start())
	t.Cleanup(func() { obs.Process.Kill(); obs.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seenAt int64 // the observer's clock at the latest line next returned
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the observer exited")
			st, at, found := strings.Cut(l, " @")
			require.True(t, found, "observer line %q", l)
			seenAt, err = strconv.ParseInt(at, 10, 64)
			require.NoError(t, err)
			return st
		case <-time.After(10 * time.Second):
			t.Fatal("the observer saw nothing for 10 s")
			return ""
		}
	}
	require.Equal(t, "none", next(), "the observer starts on no leader")

	var cands []*exec.Cmd
	for i := 0; i < 3; i++ {
		cmd := startChild(t, "candidate", prefix, append(env, "DSYNC_TEST_VALUE=c"+strconv.Itoa(i))...)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		cands = append(cands, cmd)
		// Arrival order: each candidate is in line before the next starts.
		if i == 0 {
			waitFor(t, 10*time.Second, "the first leader", func() bool {
				_, err := e.Leader(context.Background())
				return err == nil
			})
		} else {
			waitFor(t, 10*time.Second, "candidate "+strconv.Itoa(i)+" in line", func() bool {
				return llen(t, c, "failover") == i
			})
		}
	}
	l, err := e.Leader(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, "c0", l.Value)
	require.Equal(t, fmt.Sprintf("c0 %d", l.Term), next())

	rc := newRueidis(t)
	lockKey := electionKey(prefix, "failover", "fair")
	var took []time.Duration
	for i := 1; i < 3; i++ {
		var left time.Duration
		waitFor(t, 5*time.Second, "a moment between renewals", func() bool {
			ms, err := rc.Do(context.Background(), rc.B().Pttl().Key(lockKey).Build()).AsInt64()
			left = time.Duration(ms) * time.Millisecond
			return err == nil && left <= lease-100*time.Millisecond && left >= 2*lease/3+50*time.Millisecond
		})
		require.NoError(t, cands[i-1].Process.Kill())
		killed := time.Now().UnixNano()
		require.Equal(t, "none", next(), "the observer sees the loss first")
		st := next()
		d := time.Duration(seenAt - killed)
		took = append(took, d)
		nl, err := e.Leader(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, "c"+strconv.Itoa(i), nl.Value, "the next candidate in line leads")
		require.Greater(t, nl.Term, l.Term)
		require.Equal(t, fmt.Sprintf("c%d %d", i, nl.Term), st, "then the new leader")
		t.Logf("kill %d: the lease had %v left; the observer saw the new leader %v after the kill", i, left, d)
		require.LessOrEqual(t, d, left+100*time.Millisecond, "the observer saw the new leader more than 100 ms after the dead leader's lease ran out")
		l = nl
	}
	slices.Sort(took)
	t.Logf("failover after SIGKILL (lease %v), seen by an observer in another process: %v", lease, took)
	for _, d := range took {
		require.LessOrEqual(t, d, lease, "failover took longer than the lease")
	}
	select {
	case s := <-lines:
		t.Fatalf("unexpected observation %q", s)
	default:
	}
}
