package dsync_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
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
// DSYNC_TEST_NAME, one a line: "<value> <term>", or "none".
func childObserver(c *dsync.Client, _ rueidis.Client, _ string) int {
	e := c.NewElection(os.Getenv("DSYNC_TEST_NAME"))
	for l := range e.Observe(context.Background()) {
		if l.Term == 0 {
			fmt.Println("none")
		} else {
			fmt.Println(l.Value, l.Term)
		}
	}
	return 1
}

// Three processes campaign; the leader is SIGKILLed twice. Each time the
// next candidate in line leads within the lease, and an observer in a
// fourth process sees the loss and then the new leader.
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
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the observer exited")
			return l
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

	var took []time.Duration
	for i := 1; i < 3; i++ {
		require.NoError(t, cands[i-1].Process.Kill())
		killed := time.Now()
		var nl dsync.Leader
		waitFor(t, 10*time.Second, "the next leader", func() bool {
			nl, err = e.Leader(context.Background())
			return err == nil && nl.Term != l.Term
		})
		took = append(took, time.Since(killed))
		require.Equal(t, "c"+strconv.Itoa(i), nl.Value, "the next candidate in line leads")
		require.Greater(t, nl.Term, l.Term)
		require.Equal(t, "none", next(), "the observer sees the loss first")
		require.Equal(t, fmt.Sprintf("c%d %d", i, nl.Term), next(), "then the new leader")
		l = nl
	}
	slices.Sort(took)
	t.Logf("failover after SIGKILL (lease %v): %v", lease, took)
	// The killed leader's lease ends at most a lease after its last
	// renewal, which came before the kill; the candidate looks when it ends.
	for _, d := range took {
		require.Less(t, d, lease+lease/2, "failover took longer than the lease allows")
	}
	select {
	case s := <-lines:
		t.Fatalf("unexpected observation %q", s)
	default:
	}
}
