package dsync_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["group"] = childGroup
}

// groupVal is the value the Group tests share: which run made it.
type groupVal struct {
	Run int64
	PID int
}

// groupProcs and groupCallers: 3 processes x 20 goroutines call one key.
const groupProcs, groupCallers = 3, 20

// childGroup: DSYNC_TEST_CALLERS goroutines call key "k" of the Group "g"
// at once. fn counts its runs in <prefix>:runs and waits, so that every
// caller joins the run, until every process has all its callers in Do
// (<prefix>:joined) and the other processes wait in Redis (Inspect). By
// DSYNC_TEST_MODE the first run then returns, panics, ends its own
// leader's context ("cancel"), or hangs for the parent to kill its process
// ("kill": it writes its pid to <prefix>:victim). Each caller records its
// outcome in the hash <prefix>:res: "v<run>", "shared" for each shared
// result, "panic", or "err:<message>".
func childGroup(c *dsync.Client, rc rueidis.Client, prefix string) int {
	n, _ := strconv.Atoi(os.Getenv("DSYNC_TEST_CALLERS"))
	procs, _ := strconv.Atoi(os.Getenv("DSYNC_TEST_PROCS"))
	mode := os.Getenv("DSYNC_TEST_MODE")
	g := dsync.NewGroup[groupVal](c, "g")
	bg := context.Background()
	do := func(cmd rueidis.Completed) rueidis.RedisResult { return rc.Do(bg, cmd) }
	record := func(outcome string) {
		do(rc.B().Hincrby().Key(prefix + ":res").Field(outcome).Increment(1).Build())
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			defer func() {
				if r := recover(); r != nil {
					record("panic")
				}
			}()
			v, shared, err := g.Do(ctx, "k", func(fctx context.Context) (groupVal, error) {
				run, _ := do(rc.B().Incr().Key(prefix + ":runs").Build()).AsInt64()
				if run == 1 {
					groupBarrier(c, rc, prefix, procs)
					switch mode {
					case "panic":
						panic("boom")
					case "cancel":
						cancel()
						<-fctx.Done()
						return groupVal{}, fctx.Err()
					case "kill":
						do(rc.B().Set().Key(prefix + ":victim").Value(strconv.Itoa(os.Getpid())).Build())
						select {}
					}
				}
				return groupVal{Run: run, PID: os.Getpid()}, nil
			})
			switch {
			case err != nil:
				record("err:" + err.Error())
			default:
				record("v" + strconv.FormatInt(v.Run, 10))
				if shared {
					record("shared")
				}
			}
		}()
	}
	waitUntil(func() bool { return dsync.GroupCallers(g, "k") == n })
	do(rc.B().Incr().Key(prefix + ":joined").Build())
	wg.Wait()
	return 0
}

// groupBarrier waits until every process has all its callers in Do and
// the others wait in Redis (one waiter each).
func groupBarrier(c *dsync.Client, rc rueidis.Client, prefix string, procs int) {
	ctx := context.Background()
	waitUntil(func() bool {
		j, _ := rc.Do(ctx, rc.B().Get().Key(prefix+":joined").Build()).AsInt64()
		return j == int64(procs)
	})
	waitUntil(func() bool {
		sts, _ := c.Inspect(ctx, "g")
		for _, st := range sts {
			if st.Kind == dsync.KindGroup && st.Key == "k" && len(st.Waiters) == procs-1 {
				return true
			}
		}
		return false
	})
}

// waitUntil polls cond every millisecond, for a child (which has no t),
// and panics if it does not hold within 30 s (a hung wait fails loudly).
func waitUntil(cond func() bool) {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			panic("dsync test: condition not met within 30s")
		}
		time.Sleep(time.Millisecond)
	}
}

// runGroupChildren runs the 3 children of mode and returns them started.
func runGroupChildren(t *testing.T, prefix, mode string, lease time.Duration) []*exec.Cmd {
	var cmds []*exec.Cmd
	for i := 0; i < groupProcs; i++ {
		cmd := startChild(t, "group", prefix, "DSYNC_TEST_CALLERS="+strconv.Itoa(groupCallers),
			"DSYNC_TEST_PROCS="+strconv.Itoa(groupProcs), "DSYNC_TEST_MODE="+mode, "DSYNC_TEST_LEASE="+lease.String())
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		cmds = append(cmds, cmd)
	}
	return cmds
}

// groupOutcomes reads the children's outcomes and the runs of fn.
func groupOutcomes(t *testing.T, rc rueidis.Client, prefix string) (map[string]int64, int64) {
	res, err := rc.Do(context.Background(), rc.B().Hgetall().Key(prefix+":res").Build()).AsIntMap()
	require.NoError(t, err)
	runs, err := rc.Do(context.Background(), rc.B().Get().Key(prefix+":runs").Build()).AsInt64()
	require.NoError(t, err)
	return res, runs
}

// requireNoGroupKeys fails if any key of the Group is left in Redis.
func requireNoGroupKeys(t *testing.T, rc rueidis.Client, prefix string, within time.Duration) {
	t.Helper()
	var left []string
	defer func() {
		if t.Failed() {
			for _, k := range left {
				v, _ := rc.Do(context.Background(), rc.B().Dump().Key(k).Build()).ToString()
				ttl, _ := rc.Do(context.Background(), rc.B().Pttl().Key(k).Build()).AsInt64()
				t.Logf("left: %q (pttl %d ms) %q", k, ttl, v)
			}
		}
	}()
	waitFor(t, within, "the Group's keys to go", func() bool {
		var err error
		left, err = rc.Do(context.Background(), rc.B().Keys().Pattern(prefix+":{*").Build()).AsStrSlice()
		require.NoError(t, err)
		return len(left) == 0
	})
}

// TestGroupProcesses: 3 processes x 20 goroutines call one key; fn runs
// once and every caller gets its value (59 of them shared), and no key is
// left.
func TestGroupProcesses(t *testing.T) {
	prefix := testPrefix(t)
	rc := newRueidis(t)
	for _, cmd := range runGroupChildren(t, prefix, "ok", dsync.DefaultLease) {
		require.NoError(t, cmd.Wait(), "child")
	}
	res, runs := groupOutcomes(t, rc, prefix)
	require.Equal(t, int64(1), runs, "runs of fn")
	require.Equal(t, map[string]int64{"v1": groupProcs * groupCallers, "shared": groupProcs*groupCallers - 1}, res, "outcomes")
	requireNoGroupKeys(t, rc, prefix, time.Second)
}

// TestGroupLeaderFails: the leader of the first run panics, ends its own
// context, or its process is SIGKILLed; a waiter runs fn again (once), and
// every other caller gets that value: none sees the leader's end.
func TestGroupLeaderFails(t *testing.T) {
	for _, mode := range []string{"panic", "cancel", "kill"} {
		t.Run(mode, func(t *testing.T) {
			prefix := testPrefix(t)
			rc := newRueidis(t)
			const lease = time.Second
			cmds := runGroupChildren(t, prefix, mode, lease)
			want := map[string]int64{"v2": groupProcs*groupCallers - 1, "shared": groupProcs*groupCallers - 2}
			switch mode {
			case "panic":
				want["panic"] = 1
			case "cancel":
				want["err:"+context.Canceled.Error()] = 1
			case "kill":
				var pid int
				waitFor(t, 10*time.Second, "the first run", func() bool {
					s, _ := rc.Do(context.Background(), rc.B().Get().Key(prefix+":victim").Build()).ToString()
					pid, _ = strconv.Atoi(s)
					return pid != 0
				})
				killed := time.Now()
				require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
				// The victim's callers are gone with it.
				want = map[string]int64{"v2": (groupProcs - 1) * groupCallers, "shared": (groupProcs-1)*groupCallers - 1}
				for _, cmd := range cmds {
					if cmd.Process.Pid != pid {
						require.NoError(t, cmd.Wait(), "child")
					}
				}
				t.Logf("the survivors had the second run's value %v after the leader's SIGKILL (lease %v)", time.Since(killed), lease)
			}
			for _, cmd := range cmds {
				if mode != "kill" {
					require.NoError(t, cmd.Wait(), "child")
				}
			}
			res, runs := groupOutcomes(t, rc, prefix)
			require.Equal(t, int64(2), runs, "runs of fn")
			require.Equal(t, want, res, "outcomes")
			requireNoGroupKeys(t, rc, prefix, 3*lease)
		})
	}
}

// TestGroupManyKeys: 200 keys called by 2 Clients x 3 goroutines each at
// once; fn runs at most once per key at a time, every caller gets its
// key's value, and no key is left.
func TestGroupManyKeys(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	const keys = 200
	var mu sync.Mutex
	running := map[string]bool{}
	var wg sync.WaitGroup
	for _, cl := range []*dsync.Client{c, c2} {
		g := dsync.NewGroup[string](cl, "many")
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < keys; k++ {
					key := "key-" + strconv.Itoa((k*7+i)%keys)
					v, _, err := g.Do(ctxT(t), key, func(context.Context) (string, error) {
						mu.Lock()
						if running[key] {
							t.Errorf("fn of %s runs twice at once", key)
						}
						running[key] = true
						mu.Unlock()
						defer func() { mu.Lock(); delete(running, key); mu.Unlock() }()
						return "v:" + key, nil
					})
					if assert.NoError(t, err) {
						assert.Equal(t, "v:"+key, v)
					}
				}
			}()
		}
	}
	wg.Wait()
	requireNoGroupKeys(t, newRueidis(t), prefix, time.Second)
}

// TestGroupErrorShared: the leader's error reaches every waiting caller:
// in its process the error itself, elsewhere its message.
func TestGroupErrorShared(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	g1, g2 := dsync.NewGroup[int](c, "err"), dsync.NewGroup[int](c2, "err")
	boom := errors.New("boom")
	release := make(chan struct{})
	started := make(chan struct{})
	type out struct {
		err    error
		shared bool
	}
	res := make(chan out, 3)
	go func() {
		_, shared, err := g1.Do(ctxT(t), "k", func(context.Context) (int, error) {
			close(started)
			<-release
			return 0, boom
		})
		res <- out{err, shared}
	}()
	<-started
	for _, g := range []*dsync.Group[int]{g1, g2} {
		go func() {
			_, shared, err := g.Do(ctxT(t), "k", func(context.Context) (int, error) {
				t.Error("fn ran again")
				return 0, nil
			})
			res <- out{err, shared}
		}()
	}
	waitFor(t, 5*time.Second, "both callers to wait", func() bool {
		return dsync.GroupCallers(g1, "k") == 2 && groupWaiters(t, c, "err", "k") == 1
	})
	close(release)
	var local, remote int
	for i := 0; i < 3; i++ {
		o := <-res
		require.Error(t, o.err)
		require.Equal(t, "boom", o.err.Error())
		if errors.Is(o.err, boom) {
			local++
		} else {
			remote++
			require.True(t, o.shared)
		}
	}
	require.Equal(t, 2, local, "callers in the leader's process get its error itself")
	require.Equal(t, 1, remote)
	requireNoGroupKeys(t, newRueidis(t), prefix, time.Second)
}

// groupWaiters is the number of processes waiting in Redis for key.
func groupWaiters(t testing.TB, c *dsync.Client, name, key string) int {
	sts, err := c.Inspect(context.Background(), name)
	require.NoError(t, err)
	for _, st := range sts {
		if st.Kind == dsync.KindGroup && st.Key == key {
			return len(st.Waiters)
		}
	}
	return 0
}

// runningLeader starts a caller of g's key "k" whose fn runs until release
// is closed and returns 7, and returns once fn runs; leader gets the
// caller's error.
func runningLeader(t *testing.T, g *dsync.Group[int]) (release chan struct{}, leader chan error) {
	release, leader = make(chan struct{}), make(chan error, 1)
	started := make(chan struct{})
	go func() {
		v, _, err := g.Do(ctxT(t), "k", func(context.Context) (int, error) {
			close(started)
			<-release
			return 7, nil
		})
		assert.Equal(t, 7, v)
		leader <- err
	}()
	<-started
	return release, leader
}

// sharingCaller starts a caller of key "k" of c's Group "wc" that must get
// a result another call made (its fn must not run), sent on the channel.
func sharingCaller(t *testing.T, c *dsync.Client) chan int {
	stay := make(chan int, 1)
	go func() {
		v, shared, err := dsync.NewGroup[int](c, "wc").Do(ctxT(t), "k", func(context.Context) (int, error) {
			t.Error("fn ran again")
			return 0, nil
		})
		assert.NoError(t, err)
		assert.True(t, shared)
		stay <- v
	}()
	return stay
}

// TestGroupWaiterCancel: a waiter's context ends only its own wait; the
// others get the result, and the record goes when they have it.
func TestGroupWaiterCancel(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	var parked atomic.Int32 // c2's wait blocks between two looks
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithWaitParked(func(_ string, p bool) {
		if p {
			parked.Add(1)
		} else {
			parked.Add(-1)
		}
	}))
	g1, g2 := dsync.NewGroup[int](c, "wc"), dsync.NewGroup[int](c2, "wc")
	release, leader := runningLeader(t, g1)
	// A remote waiter and a local follower are cancelled; another remote
	// one stays.
	ctx, cancel := context.WithCancel(ctxT(t))
	errs := make(chan error, 2)
	for _, g := range []*dsync.Group[int]{g1, g2} {
		go func() {
			_, _, err := g.Do(ctx, "k", func(context.Context) (int, error) { t.Error("fn ran again"); return 0, nil })
			errs <- err
		}()
	}
	stay := sharingCaller(t, newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix)))
	// Waiting, as the cancelled remote waiter's Client knows it: its wait
	// blocks between two looks. Redis lists the waiter once its first look
	// has run, before the Client has read the reply, and the wait looks
	// again once or twice (polling while its subscription is not live yet,
	// then once subscribed); a look whose reply the cancel abandons leaves
	// its call in the undone set for a lease (see
	// TestGroupWaiterCancelDuringLook).
	waitFor(t, 5*time.Second, "the callers to wait", func() bool {
		return dsync.GroupCallers(g1, "k") == 2 && parked.Load() == 1 && groupWaiters(t, c, "wc", "k") == 2
	})
	cancel()
	for i := 0; i < 2; i++ {
		require.ErrorIs(t, <-errs, context.Canceled)
	}
	waitFor(t, 5*time.Second, "the cancelled remote waiter to leave", func() bool { return groupWaiters(t, c, "wc", "k") == 1 })
	close(release)
	require.NoError(t, <-leader)
	require.Equal(t, 7, <-stay)
	requireNoGroupKeys(t, newRueidis(t), prefix, time.Second)
}

// heldBegin is a rueidis client that, once armed, sends a begin of the
// Group key whose state key is state (group_begin.lua: 6 keys, 5
// arguments) whatever the caller's context, and keeps its reply from the
// caller until that context ends: the begin has run in Redis, and its
// outcome is unknown to the caller, as when a cancel comes while a look
// is in flight. ran is closed when one has run.
type heldBegin struct {
	rueidis.Client
	state string
	armed atomic.Bool
	ran   chan struct{}
	once  sync.Once
}

func (r *heldBegin) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	cs := cmd.Commands()
	if !r.armed.Load() || len(cs) != 3+6+5 || cs[2] != "6" || cs[3] != r.state {
		return r.Client.Do(ctx, cmd)
	}
	if err := r.Client.Do(context.WithoutCancel(ctx), cmd).Error(); err != nil {
		return rueidis.NewErrorResult(err)
	}
	r.once.Do(func() { close(r.ran) })
	<-ctx.Done()
	return rueidis.NewErrorResult(ctx.Err())
}

// TestGroupWaiterCancelDuringLook: a waiter cancelled while its look is in
// flight (the begin has run in Redis, its reply not read) cannot know what
// the look did, and is undone: the others still get the result, the record
// goes when they have it, and what the undo keeps (the call, in the
// undone set, so that a begin of it still on its way does nothing) lives
// no longer than the cancelled Client's lease.
func TestGroupWaiterCancelDuringLook(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	const lease = time.Second
	hb := &heldBegin{Client: newRueidis(t), state: prefix + ":{wc}:group:s:k", ran: make(chan struct{})}
	c2 := newClientOn(t, hb, dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	g1 := dsync.NewGroup[int](c, "wc")
	release, leader := runningLeader(t, g1)
	stay := sharingCaller(t, newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix)))
	waitFor(t, 5*time.Second, "the staying waiter to wait", func() bool { return groupWaiters(t, c, "wc", "k") == 1 })
	hb.armed.Store(true)
	ctx, cancel := context.WithCancel(ctxT(t))
	got := make(chan error, 1)
	go func() {
		_, _, err := dsync.NewGroup[int](c2, "wc").Do(ctx, "k", func(context.Context) (int, error) { t.Error("fn ran again"); return 0, nil })
		got <- err
	}()
	select {
	case <-hb.ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled waiter's begin did not run")
	}
	require.Equal(t, 2, groupWaiters(t, c, "wc", "k"), "Redis lists the waiter whose reply is held")
	cancel()
	require.ErrorIs(t, <-got, context.Canceled)
	close(release)
	require.NoError(t, <-leader)
	require.Equal(t, 7, <-stay)
	rc := newRueidis(t)
	undone := prefix + ":{wc}:group:u:k"
	waitFor(t, time.Second, "the record to go, but the undone set", func() bool {
		left, err := rc.Do(context.Background(), rc.B().Keys().Pattern(prefix+":{*").Build()).AsStrSlice()
		require.NoError(t, err)
		return len(left) == 1 && left[0] == undone
	})
	ttl, err := rc.Do(context.Background(), rc.B().Pttl().Key(undone).Build()).AsInt64()
	require.NoError(t, err)
	require.Greater(t, ttl, int64(0), "the undone set expires")
	require.LessOrEqual(t, ttl, lease.Milliseconds(), "the undone set lives a lease at most")
	requireNoGroupKeys(t, rc, prefix, lease)
}
