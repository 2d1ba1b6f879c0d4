package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// Issue 8 item 10: sequences of lock, unlock, acquire and release on two
// names, by three owners (in two Clients), with random counts, cancelled
// contexts and invalid arguments, run against redis-server and an
// in-memory reference model. After every step the state Redis shows
// (Client.Inspect) must equal the model's, and every call must return what
// the model says: success, a refusal (Try...), or one of the documented
// errors ErrNotHeld, ErrInvalidArgument and the context's error.
//
// The seed corpus runs in every go test; explore with
//
//	go test -run '^$' -fuzz FuzzOperations -fuzztime 60s -fuzzminimizetime 5s
//
// Each input byte triple is one step: op, owner and name, argument.

const (
	fuzzOwners = 3
	fuzzNames  = 2
	fuzzSize   = 3  // semaphore size
	fuzzOps    = 28 // operations: op % fuzzOps
)

// fuzzGroupKeys are the keys of the Groups' calls.
var fuzzGroupKeys = [2]string{"a", "b{%}"}

var fuzzSeq atomic.Int64

// fuzzPrims names the primitive of each operation (op % fuzzOps);
// fuzzRan marks the operations that ran (for the row).
var (
	fuzzPrims = [fuzzOps]string{"Mutex", "Mutex", "Mutex", "RWMutex", "RWMutex", "RWMutex", "RWMutex", "Semaphore", "Semaphore", "Semaphore",
		"FairMutex", "FairMutex", "Once", "WaitGroup", "WaitGroup", "WaitGroup", "OnceValue", "MultiLock", "MultiLock", "MultiLock",
		"Election", "Election", "Election", "Election", "Group", "Group", "Cond", "Cond"}
	fuzzRan [fuzzOps]atomic.Bool
)

// fuzzRanList lists the primitives whose operations ran, each once.
func fuzzRanList() string {
	ran := map[string]bool{}
	for i, p := range fuzzPrims {
		ran[p] = ran[p] || fuzzRan[i].Load()
	}
	var out []string
	for _, p := range []string{"Mutex", "FairMutex", "RWMutex", "Semaphore", "Once", "OnceValue", "WaitGroup", "MultiLock", "Election", "Group", "Cond"} {
		if ran[p] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ", ")
}

// fuzzModel is the reference: per name a Mutex, an RWMutex and a
// Semaphore. Holders are owner indexes; counts are acquisitions.
type fuzzModel struct {
	mu [fuzzNames]struct{ owner, count int }
	rw [fuzzNames]struct {
		w, wc int
		r     map[int]int
	}
	sem  [fuzzNames]map[int]int64
	fair [fuzzNames]struct{ owner, count int }
	done [fuzzNames]bool  // Once
	wg   [fuzzNames]int64 // WaitGroup counter
	// OnceValue (on names of its own): done, and the value stored.
	vdone [fuzzNames]bool
	vval  [fuzzNames]string
	// MultiLock acquisitions (over both names' Mutexes) by owner, through
	// the MultiLock of the owner's Client.
	ml [fuzzOwners]int
	// Election: the leader (an owner, -1 for none).
	leader [fuzzNames]int
	// Group (results kept a minute): the result recorded per key.
	group [fuzzNames]map[string]string
}

func newFuzzModel() *fuzzModel {
	m := &fuzzModel{}
	for k := range fuzzNames {
		m.mu[k].owner = -1
		m.fair[k].owner = -1
		m.rw[k].w = -1
		m.rw[k].r = map[int]int{}
		m.sem[k] = map[int]int64{}
		m.leader[k] = -1
		m.group[k] = map[string]string{}
	}
	return m
}

// multiUnlock releases owner o's innermost MultiLock acquisition: every
// member, even when one is no longer held (the owner released it through
// the Mutex): then ErrNotHeld.
func (m *fuzzModel) multiUnlock(o int) error {
	if m.ml[o] == 0 {
		return dsync.ErrNotHeld
	}
	m.ml[o]--
	var err error
	for k := range fuzzNames {
		s := &m.mu[k]
		if s.owner != o {
			err = dsync.ErrNotHeld
			continue
		}
		if s.count--; s.count == 0 {
			s.owner = -1
		}
	}
	return err
}

func (m *fuzzModel) semUsed(k int) (t int64) {
	for _, n := range m.sem[k] {
		t += n
	}
	return t
}

// fuzzEnv is the system under test for one input.
type fuzzEnv struct {
	t      *testing.T
	cs     [2]*dsync.Client
	ctxs   [fuzzOwners]context.Context // each carries its owner
	owners [fuzzOwners]string
	names  [fuzzNames]string
	vnames [fuzzNames]string   // OnceValue's names (its Inspect kind is a Once's)
	mls    [2]*dsync.MultiLock // per Client, over the Mutexes of both names
	// terms are the leadership contexts of the last Campaign of each owner
	// per name (ended ones too: their Resign must return ErrNotHeld).
	terms [fuzzNames][fuzzOwners]context.Context
	m     *fuzzModel
	log   []string
}

func (e *fuzzEnv) client(o int) *dsync.Client { return e.cs[o%2] }

// step runs one operation and checks its outcome against the model.
func (e *fuzzEnv) step(op, who, arg byte) {
	t, m := e.t, e.m
	o, k := int(who)%fuzzOwners, int(who/fuzzOwners)%fuzzNames
	cancelled := arg&0x80 != 0
	ctx := e.ctxs[o]
	if cancelled {
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
	}
	c, name := e.client(o), e.names[k]
	var got, want error
	var ok, wantOK bool
	var what string
	// acq runs an acquisition: with a cancelled context it must fail with
	// context.Canceled and change nothing; otherwise grant decides.
	acq := func(try func(context.Context) (bool, error), grant func() bool) {
		ok, got = try(ctx)
		if cancelled {
			want = context.Canceled
			return
		}
		wantOK = grant()
	}
	switch op % fuzzOps {
	case 0, 1: // Mutex TryLockContext / LockContext where it cannot wait
		mx := c.NewMutex(name)
		s := &m.mu[k]
		free := s.owner == -1 || s.owner == o
		blocking := op%fuzzOps == 1 && (free || cancelled)
		what = fmt.Sprintf("mutex(%d).lock(o%d, blocking %v, cancelled %v)", k, o, blocking, cancelled)
		acq(func(ctx context.Context) (bool, error) {
			if blocking {
				// The model says it cannot wait: a wait fails the step.
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				l, err := mx.LockContext(ctx)
				return l != nil, err
			}
			_, ok, err := mx.TryLockContext(ctx)
			return ok, err
		}, func() bool {
			if !free {
				return false
			}
			s.owner = o
			s.count++
			return true
		})
	case 2: // Mutex UnlockContext
		what = fmt.Sprintf("mutex(%d).unlock(o%d, cancelled %v)", k, o, cancelled)
		got = c.NewMutex(name).UnlockContext(ctx)
		s := &m.mu[k]
		if s.owner != o {
			want = dsync.ErrNotHeld
		} else if s.count--; s.count == 0 {
			s.owner = -1
		}
	case 3: // RWMutex TryLockContext
		what = fmt.Sprintf("rw(%d).lock(o%d, cancelled %v)", k, o, cancelled)
		acq(func(ctx context.Context) (bool, error) {
			_, ok, err := c.NewRWMutex(name).TryLockContext(ctx)
			return ok, err
		}, func() bool {
			s := &m.rw[k]
			switch {
			case s.w == o:
				s.wc++
				return true
			case s.w != -1:
				return false
			}
			for r := range s.r {
				if r != o {
					return false // another reader: no upgrade
				}
			}
			s.w, s.wc = o, 1
			return true
		})
	case 4: // RWMutex TryRLockContext
		what = fmt.Sprintf("rw(%d).rlock(o%d, cancelled %v)", k, o, cancelled)
		acq(func(ctx context.Context) (bool, error) {
			_, ok, err := c.NewRWMutex(name).TryRLockContext(ctx)
			return ok, err
		}, func() bool {
			s := &m.rw[k]
			if s.r[o] == 0 && s.w != -1 && s.w != o {
				return false
			}
			s.r[o]++
			return true
		})
	case 5: // RWMutex UnlockContext
		what = fmt.Sprintf("rw(%d).unlock(o%d, cancelled %v)", k, o, cancelled)
		got = c.NewRWMutex(name).UnlockContext(ctx)
		s := &m.rw[k]
		if s.w != o {
			want = dsync.ErrNotHeld
		} else if s.wc--; s.wc == 0 {
			s.w = -1
		}
	case 6: // RWMutex RUnlockContext
		what = fmt.Sprintf("rw(%d).runlock(o%d, cancelled %v)", k, o, cancelled)
		got = c.NewRWMutex(name).RUnlockContext(ctx)
		s := &m.rw[k]
		if s.r[o] == 0 {
			want = dsync.ErrNotHeld
		} else if s.r[o]--; s.r[o] == 0 {
			delete(s.r, o)
		}
	case 7, 8: // Semaphore TryAcquire of 0..size+1 permits
		n := int64(arg&0x7f) % (fuzzSize + 2)
		what = fmt.Sprintf("sem(%d).acquire(o%d, %d, cancelled %v)", k, o, n, cancelled)
		acq(func(ctx context.Context) (bool, error) {
			_, ok, err := c.NewSemaphore(name, fuzzSize).TryAcquire(ctx, n)
			return ok, err
		}, func() bool {
			if n < 1 || n > fuzzSize {
				want = dsync.ErrInvalidArgument
				return false
			}
			if m.semUsed(k)+n > fuzzSize {
				return false
			}
			m.sem[k][o] += n
			return true
		})
		if cancelled && (n < 1 || n > fuzzSize) {
			want = nil // either refusal is documented; checked below
		}
	case 9: // Semaphore Release of 0..size+1 permits
		n := int64(arg&0x7f) % (fuzzSize + 2)
		what = fmt.Sprintf("sem(%d).release(o%d, %d, cancelled %v)", k, o, n, cancelled)
		got = c.NewSemaphore(name, fuzzSize).Release(ctx, n)
		switch {
		case n < 1 || n > fuzzSize:
			want = dsync.ErrInvalidArgument
		case m.sem[k][o] < n:
			want = dsync.ErrNotHeld
		default:
			if m.sem[k][o] -= n; m.sem[k][o] == 0 {
				delete(m.sem[k], o)
			}
		}
	case 10: // FairMutex TryLockContext
		s := &m.fair[k]
		what = fmt.Sprintf("fair(%d).trylock(o%d, cancelled %v)", k, o, cancelled)
		acq(func(ctx context.Context) (bool, error) {
			_, ok, err := c.NewFairMutex(name).TryLockContext(ctx)
			return ok, err
		}, func() bool {
			if s.owner != -1 && s.owner != o {
				return false
			}
			s.owner = o
			s.count++
			return true
		})
	case 11: // FairMutex UnlockContext
		what = fmt.Sprintf("fair(%d).unlock(o%d, cancelled %v)", k, o, cancelled)
		got = c.NewFairMutex(name).UnlockContext(ctx)
		s := &m.fair[k]
		if s.owner != o {
			want = dsync.ErrNotHeld
		} else if s.count--; s.count == 0 {
			s.owner = -1
		}
	case 12: // Once.Do, f failing when arg is odd
		fail := arg&1 != 0
		what = fmt.Sprintf("once(%d).do(o%d, f fails %v, cancelled %v)", k, o, fail, cancelled)
		ran := false
		got = c.NewOnce(name).Do(ctx, func(context.Context) error {
			ran = true
			if fail {
				return errFuzzF
			}
			return nil
		})
		wantRan := !cancelled && !m.done[k]
		switch {
		case cancelled:
			want = context.Canceled
		case wantRan && fail:
			want = errFuzzF
		case wantRan:
			m.done[k] = true
		}
		require.Equal(t, wantRan, ran, "%s: f ran (model, Redis)", what)
	case 13, 14: // WaitGroup Add of 0..2, or of -1..-3
		d := int64(arg&0x7f) % 3
		if op%fuzzOps == 14 {
			d = -d - 1
		}
		what = fmt.Sprintf("wg(%d).add(o%d, %d, cancelled %v)", k, o, d, cancelled)
		got = c.NewWaitGroup(name).Add(ctx, d)
		switch {
		case cancelled:
			want = context.Canceled
		case m.wg[k]+d < 0:
			want = dsync.ErrInvalidArgument
		default:
			m.wg[k] += d
		}
	case 15: // WaitGroup Wait: at once at zero, else cut short by a 20 ms deadline
		what = fmt.Sprintf("wg(%d).wait(o%d, cancelled %v)", k, o, cancelled)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		got = c.NewWaitGroup(name).Wait(wctx)
		cancel()
		switch {
		case cancelled:
			want = context.Canceled
		case m.wg[k] > 0:
			want = context.DeadlineExceeded
		}
	case 16: // OnceValue (a fresh function: no cached value), f failing when arg is odd
		fail := arg&1 != 0
		what = fmt.Sprintf("oncevalue(%d).call(o%d, f fails %v, cancelled %v)", k, o, fail, cancelled)
		ran, val := false, fmt.Sprintf("v%d.%d", o, len(e.log))
		v, err := dsync.OnceValue(c, e.vnames[k], func(context.Context) (string, error) {
			ran = true
			if fail {
				return "", errFuzzF
			}
			return val, nil
		})(ctx)
		got = err
		wantRan := !cancelled && !m.vdone[k]
		switch {
		case cancelled:
			want = context.Canceled
		case wantRan && fail:
			want = errFuzzF
		case wantRan:
			m.vdone[k], m.vval[k] = true, val
		}
		require.Equal(t, wantRan, ran, "%s: f ran (model, Redis)", what)
		if err == nil {
			require.Equal(t, m.vval[k], v, "%s: the value (model, Redis)", what)
		}
	case 17, 18: // MultiLock LockContext; cut short by 50 ms where the model says it must wait
		ml := e.mls[o%2]
		free := true
		for kk := range fuzzNames {
			if s := m.mu[kk]; s.owner != -1 && s.owner != o {
				free = false
			}
		}
		what = fmt.Sprintf("multi.lock(o%d, free %v, cancelled %v)", o, free, cancelled)
		acq(func(ctx context.Context) (bool, error) {
			d := 5 * time.Second
			if !free {
				d = 50 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			l, err := ml.LockContext(ctx)
			return l != nil && err == nil, err
		}, func() bool {
			if !free {
				// It may take a free member before it waits: that member
				// must be released again (compare checks).
				want = context.DeadlineExceeded
				return false
			}
			for kk := range fuzzNames {
				m.mu[kk].owner = o
				m.mu[kk].count++
			}
			m.ml[o]++
			return true
		})
	case 19: // MultiLock UnlockContext
		what = fmt.Sprintf("multi.unlock(o%d, cancelled %v)", o, cancelled)
		got = e.mls[o%2].UnlockContext(ctx)
		want = m.multiUnlock(o)
	case 20, 21: // Election Campaign; cut short by 50 ms where another owner leads
		el := c.NewElection(name)
		leader := m.leader[k]
		what = fmt.Sprintf("election(%d).campaign(o%d, leader o%d, cancelled %v)", k, o, leader, cancelled)
		acq(func(ctx context.Context) (bool, error) {
			d := 5 * time.Second
			if leader >= 0 && leader != o {
				d = 50 * time.Millisecond
			}
			cctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			term, err := el.Campaign(cctx, fmt.Sprintf("v%d", o))
			if err == nil {
				e.terms[k][o] = term
			}
			return err == nil, err
		}, func() bool {
			switch {
			case leader == o:
				want = dsync.ErrInvalidArgument // use Proclaim
				return false
			case leader >= 0:
				want = context.DeadlineExceeded
				return false
			}
			m.leader[k] = o
			return true
		})
	case 22: // Election Resign, of the owner's last term (or of a context with no term), cancelled or not
		term := e.terms[k][o]
		if term == nil {
			term = e.ctxs[o]
		}
		if cancelled {
			tc, cancel := context.WithCancel(term)
			cancel()
			term = tc
		}
		what = fmt.Sprintf("election(%d).resign(o%d, cancelled %v)", k, o, cancelled)
		got = c.NewElection(name).Resign(term)
		// Resign "runs even if lctx is already cancelled".
		if m.leader[k] != o {
			want = dsync.ErrNotHeld
		} else {
			m.leader[k] = -1
		}
	case 23: // Election Leader
		what = fmt.Sprintf("election(%d).leader(o%d, cancelled %v)", k, o, cancelled)
		var l dsync.Leader
		l, got = c.NewElection(name).Leader(ctx)
		switch {
		case cancelled:
			want = context.Canceled
		case m.leader[k] < 0:
			want = dsync.ErrNoLeader
		default:
			lo := m.leader[k]
			require.Equal(t, []string{e.owners[lo], fmt.Sprintf("v%d", lo), fmt.Sprint(tokenOf(e.terms[k][lo]))},
				[]string{l.Owner, l.Value, fmt.Sprint(l.Term)}, "%s: the leader's owner, value and term (model, Redis)", what)
		}
	case 24: // Group Do (results kept): runs fn unless a result is recorded
		key := fuzzGroupKeys[arg&1]
		what = fmt.Sprintf("group(%d).do(o%d, %q, cancelled %v)", k, o, key, cancelled)
		ran, val := false, fmt.Sprintf("g%d.%d", o, len(e.log))
		v, shared, err := dsync.NewGroup[string](c, name, dsync.WithResultTTL(time.Minute)).Do(ctx, key, func(context.Context) (string, error) {
			ran = true
			return val, nil
		})
		got = err
		rec, done := m.group[k][key]
		switch {
		case cancelled:
			want = context.Canceled
		case done:
			val = rec
		default:
			m.group[k][key] = val
		}
		wantRan := !cancelled && !done
		require.Equal(t, wantRan, ran, "%s: fn ran (model, Redis)", what)
		if err == nil {
			require.Equal(t, []string{val, fmt.Sprint(done)}, []string{v, fmt.Sprint(shared)}, "%s: the value and shared (model, Redis)", what)
		}
	case 25: // Group Forget
		key := fuzzGroupKeys[arg&1]
		what = fmt.Sprintf("group(%d).forget(o%d, %q, cancelled %v)", k, o, key, cancelled)
		got = dsync.NewGroup[string](c, name, dsync.WithResultTTL(time.Minute)).Forget(ctx, key)
		if cancelled {
			want = context.Canceled
		} else {
			delete(m.group[k], key)
		}
	case 26: // Cond Wait on the name's Mutex: cancelled, cut short, or signalled by the other Client
		e.condWait(o, k, arg, cancelled, &what, &ok, &wantOK, &got, &want)
	case 27: // Cond Signal or Broadcast: nobody waits between steps
		broadcast := arg&1 != 0
		what = fmt.Sprintf("cond(%d).signal(o%d, broadcast %v, cancelled %v)", k, o, broadcast, cancelled)
		cd := c.NewCond(c.NewMutex(name))
		if broadcast {
			got = cd.Broadcast(ctx)
		} else {
			got = cd.Signal(ctx)
		}
		if cancelled {
			want = context.Canceled
		}
	}
	fuzzRan[op%fuzzOps].Store(true)
	e.log = append(e.log, fmt.Sprintf("%s = %v, %v", what, ok, got))
	if got != nil {
		require.True(t, documented(got), "undocumented error from %s: %v", what, got)
	}
	switch {
	case want == nil && op%fuzzOps >= 7 && op%fuzzOps <= 8 && cancelled:
		// An invalid count with a cancelled context: ErrInvalidArgument or
		// context.Canceled, nothing granted.
		require.Error(t, got, "%s: want a refusal", what)
		require.False(t, ok, "%s: want a refusal", what)
	case want == nil && got != nil, want != nil && !errors.Is(got, want):
		t.Fatalf("%s: error %v, want %v", what, got, want)
	case ok != wantOK:
		t.Fatalf("%s: acquired %v, model says %v", what, ok, wantOK)
	}
	e.compare(what)
}

// condWait is step 26: where the name's Mutex is free, owner o locks it
// and Waits with the lock context: cancelled (Wait returns
// context.Canceled, the lock still held), with a 20 ms deadline
// (DeadlineExceeded, the lock released), or signalled by the other Client
// once Redis shows the waiter (Signal or Broadcast: Wait returns holding
// the lock). Where the Mutex is held, Wait with a context that is no lock
// context returns ErrWrongContext and changes nothing.
func (e *fuzzEnv) condWait(o, k int, arg byte, cancelled bool, what *string, ok, wantOK *bool, got, want *error) {
	t, m := e.t, e.m
	c, name := e.client(o), e.names[k]
	mx := c.NewMutex(name)
	cd := c.NewCond(mx)
	if s := m.mu[k]; s.owner != -1 {
		*what = fmt.Sprintf("cond(%d).wait(o%d, mutex held by o%d)", k, o, s.owner)
		_, *got = cd.Wait(e.ctxs[o])
		*want = dsync.ErrWrongContext
		return
	}
	mode := "signal"
	switch {
	case cancelled:
		mode = "cancelled"
	case arg&1 == 0:
		mode = "deadline"
	case arg&2 != 0:
		mode = "broadcast"
	}
	*what = fmt.Sprintf("cond(%d).wait(o%d, %s)", k, o, mode)
	lctx, locked, err := mx.TryLockContext(e.ctxs[o])
	require.NoError(t, err, "%s: lock", *what)
	require.True(t, locked, "%s: lock of the free Mutex", *what)
	m.mu[k].owner, m.mu[k].count = o, 1
	switch mode {
	case "cancelled":
		wctx, cancel := context.WithCancel(lctx)
		cancel()
		_, *got = cd.Wait(wctx)
		*want = context.Canceled // the lock still held
	case "deadline":
		wctx, cancel := context.WithTimeout(lctx, 20*time.Millisecond)
		_, *got = cd.Wait(wctx)
		cancel()
		*want = context.DeadlineExceeded
		m.mu[k].owner, m.mu[k].count = -1, 0 // On error the lock is not held
	default:
		woke := make(chan error, 1)
		go func() {
			_, err := cd.Wait(lctx)
			woke <- err
		}()
		waitFor(t, 5*time.Second, *what+": Redis shows the waiter", func() bool {
			sts, err := e.cs[0].Inspect(context.Background(), name)
			require.NoError(t, err)
			for _, st := range sts {
				if st.Kind == dsync.KindCond && len(st.Waiters) == 1 {
					return true
				}
			}
			return false
		})
		oc := e.cs[(o+1)%2]
		ocd := oc.NewCond(oc.NewMutex(name))
		if mode == "broadcast" {
			require.NoError(t, ocd.Broadcast(context.Background()), "%s: Broadcast", *what)
		} else {
			require.NoError(t, ocd.Signal(context.Background()), "%s: Signal", *what)
		}
		select {
		case *got = <-woke:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the waiter was not woken within 5 s", *what)
		}
		*ok, *wantOK = *got == nil, true // it returns holding the lock
	}
}

var errFuzzF = errors.New("f failed")

func documented(err error) bool {
	return errors.Is(err, errFuzzF) || errors.Is(err, dsync.ErrNotHeld) || errors.Is(err, dsync.ErrInvalidArgument) ||
		errors.Is(err, dsync.ErrNoLeader) || errors.Is(err, dsync.ErrWrongContext) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (e *fuzzEnv) history() string { return "steps:\n  " + strings.Join(e.log, "\n  ") }

// compare checks that Redis shows exactly the model's holders, modes and
// free permits, and no waiters.
func (e *fuzzEnv) compare(after string) {
	t, m := e.t, e.m
	for k, name := range e.names {
		sts := e.inspectSettled(name, after)
		var mx, rw, sem, fair dsync.LockState
		semFound, onceDone := false, false
		var counter int64
		var leader string
		var elHolders, groupDone []string
		for _, st := range sts {
			switch st.Kind {
			case dsync.KindFairMutex:
				fair = st
			case dsync.KindOnce:
				onceDone = st.Done
				require.Empty(t, st.Holders, "after %s: a Once shows runs in progress", after)
			case dsync.KindWaitGroup:
				counter = st.Counter
			case dsync.KindMutex:
				mx = st
			case dsync.KindRWMutex:
				rw = st
			case dsync.KindSemaphore:
				sem, semFound = st, true
			case dsync.KindElection:
				leader = st.Leader.Owner
				for _, h := range st.Holders {
					elHolders = append(elHolders, h.Owner)
				}
			case dsync.KindGroup:
				require.Empty(t, st.Holders, "after %s: Group %d key %q shows a run in progress", after, k, st.Key)
				if st.Done {
					groupDone = append(groupDone, st.Key)
				}
			case dsync.KindCond:
				require.Empty(t, st.Holders, "after %s: Cond %d shows holders", after, k)
			default:
				t.Fatalf("Inspect after %s shows a %s", after, st.Kind)
			}
			require.Empty(t, st.Waiters, "after %s Redis shows waiters on %s %d", after, st.Kind, k)
		}
		var want, got []string
		// Redis counts one acquisition per owner: re-entries through the
		// Client that holds the lock are counted there alone, and each
		// owner here always uses the same Client.
		if s := m.mu[k]; s.owner >= 0 {
			want = append(want, "mutex "+e.owners[s.owner]+" 1")
		}
		for _, h := range mx.Holders {
			got = append(got, fmt.Sprintf("mutex %s %d", h.Owner, h.Count))
		}
		if s := m.fair[k]; s.owner >= 0 {
			want = append(want, "fair "+e.owners[s.owner]+" 1")
		}
		for _, h := range fair.Holders {
			got = append(got, fmt.Sprintf("fair %s %d", h.Owner, h.Count))
		}
		require.Equal(t, m.done[k], onceDone, "after %s, name %d: Once done (model, Redis)", after, k)
		require.Equal(t, m.wg[k], counter, "after %s, name %d: WaitGroup counter (model, Redis)", after, k)
		wantLeader, wantEl := "", []string(nil)
		if lo := m.leader[k]; lo >= 0 {
			wantLeader, wantEl = e.owners[lo], []string{e.owners[lo]}
		}
		require.Equal(t, wantLeader, leader, "after %s, name %d: Election leader (model, Redis)", after, k)
		require.Equal(t, wantEl, elHolders, "after %s, name %d: Election lock holders (model, Redis)", after, k)
		var wantDone []string
		for key := range m.group[k] {
			wantDone = append(wantDone, key)
		}
		sort.Strings(wantDone)
		sort.Strings(groupDone)
		require.Equal(t, wantDone, groupDone, "after %s, name %d: Group keys with a result (model, Redis)", after, k)
		rs := m.rw[k]
		mode := ""
		if rs.w >= 0 {
			mode = "write"
			want = append(want, "w "+e.owners[rs.w]+" 1")
		} else if len(rs.r) > 0 {
			mode = "read"
		}
		for r := range rs.r {
			want = append(want, "r "+e.owners[r]+" 1")
		}
		for i, h := range rw.Holders {
			kind := "r"
			if i == 0 && rw.Mode == "write" {
				kind = "w"
			}
			got = append(got, fmt.Sprintf("%s %s %d", kind, h.Owner, h.Count))
		}
		require.Equal(t, mode, rw.Mode, "after %s: rw %d mode (model, Redis)", after, k)
		for o, n := range m.sem[k] {
			want = append(want, fmt.Sprintf("sem %s %d", e.owners[o], n))
		}
		for _, h := range sem.Holders {
			got = append(got, fmt.Sprintf("sem %s %d", h.Owner, h.Permits))
		}
		free := int64(fuzzSize) - m.semUsed(k)
		if semFound {
			require.Equal(t, []int64{fuzzSize, free}, []int64{sem.Size, sem.Free}, "after %s: semaphore %d size and free permits (model, Redis)", after, k)
		} else {
			require.Equal(t, int64(fuzzSize), free, "after %s: semaphore %d not in Redis; free permits in the model", after, k)
		}
		sort.Strings(want)
		sort.Strings(got)
		require.Equal(t, strings.Join(want, "; "), strings.Join(got, "; "), "after %s, name %d: holders (model, Redis)", after, k)

		sts, err := e.cs[1].Inspect(context.Background(), e.vnames[k])
		require.NoError(t, err, "Inspect after %s", after)
		vdone := false
		for _, st := range sts {
			require.Equal(t, dsync.KindOnce, st.Kind, "after %s: OnceValue name %d shows a %s", after, k, st.Kind)
			require.Empty(t, st.Holders, "after %s: a OnceValue shows runs in progress", after)
			vdone = st.Done
		}
		require.Equal(t, m.vdone[k], vdone, "after %s, name %d: OnceValue done (model, Redis)", after, k)
	}
}

// inspectSettled inspects name once no Mutex waiter shows. A Client's
// entry among a Mutex's waiters is removed in the background when its last
// waiting goroutine gives up (Mutex.unregister; LockState.Waiters says a
// Mutex's waiters are as of each Client's last attempt), so a step whose
// wait ended may return before Redis no longer shows it: allow that
// removal 5 s. So is a woken Cond waiter's place (Cond.Wait leaves it in
// the background once woken). Every other kind's waiters are checked at
// once by compare.
func (e *fuzzEnv) inspectSettled(name, after string) []dsync.LockState {
	deadline := time.Now().Add(5 * time.Second)
	for {
		sts, err := e.cs[0].Inspect(context.Background(), name)
		require.NoError(e.t, err, "Inspect after %s", after)
		waiting := false
		for _, st := range sts {
			waiting = waiting || (st.Kind == dsync.KindMutex || st.Kind == dsync.KindCond) && len(st.Waiters) > 0
		}
		if !waiting || time.Now().After(deadline) {
			return sts
		}
		time.Sleep(time.Millisecond)
	}
}

// cleanup releases everything the model holds, checking each release,
// so that the Clients carry no holds into the next input.
func (e *fuzzEnv) cleanup() {
	m := e.m
	for o := range fuzzOwners {
		for m.ml[o] > 0 {
			err := e.mls[o%2].UnlockContext(e.ctxs[o])
			if want := m.multiUnlock(o); want != nil {
				require.ErrorIs(e.t, err, want, "cleanup: multi unlock")
			} else {
				require.NoError(e.t, err, "cleanup: multi unlock")
			}
		}
	}
	for k, name := range e.names {
		if lo := m.leader[k]; lo >= 0 {
			require.NoError(e.t, e.client(lo).NewElection(name).Resign(e.terms[k][lo]), "cleanup: election resign")
			m.leader[k] = -1
		}
		for m.mu[k].owner >= 0 {
			o := m.mu[k].owner
			require.NoError(e.t, e.client(o).NewMutex(name).UnlockContext(e.ctxs[o]), "cleanup: mutex unlock")
			if m.mu[k].count--; m.mu[k].count == 0 {
				m.mu[k].owner = -1
			}
		}
		for m.fair[k].owner >= 0 {
			o := m.fair[k].owner
			require.NoError(e.t, e.client(o).NewFairMutex(name).UnlockContext(e.ctxs[o]), "cleanup: fair unlock")
			if m.fair[k].count--; m.fair[k].count == 0 {
				m.fair[k].owner = -1
			}
		}
		if m.wg[k] > 0 {
			require.NoError(e.t, e.cs[0].NewWaitGroup(name).Add(context.Background(), -m.wg[k]), "cleanup: wg add")
			m.wg[k] = 0
		}
		for ; m.rw[k].w >= 0 && m.rw[k].wc > 0; m.rw[k].wc-- {
			o := m.rw[k].w
			require.NoError(e.t, e.client(o).NewRWMutex(name).UnlockContext(e.ctxs[o]), "cleanup: rw unlock")
		}
		m.rw[k].w = -1
		for o, n := range m.rw[k].r {
			for range n {
				require.NoError(e.t, e.client(o).NewRWMutex(name).RUnlockContext(e.ctxs[o]), "cleanup: rw runlock")
			}
			delete(m.rw[k].r, o)
		}
		for o, n := range m.sem[k] {
			require.NoError(e.t, e.client(o).NewSemaphore(name, fuzzSize).Release(e.ctxs[o], n), "cleanup: sem release")
			delete(m.sem[k], o)
		}
	}
	e.compare("cleanup")
}

func FuzzOperations(f *testing.F) {
	// Hand-written seeds: re-entry, upgrade and downgrade, foreign
	// releases, permits beyond the size, cancelled contexts, the
	// FairMutex, Once and WaitGroup; names with braces, '%', binary bytes,
	// and long ones (see fuzzName).
	plain := []byte{}
	f.Add(plain, []byte{0, 0, 0, 0, 0, 0, 2, 1, 0, 2, 0, 0, 2, 0, 0, 2, 0, 0})                                                                                                                             // mutex re-entry, foreign and extra unlock
	f.Add([]byte("{a}\xffb}{"), []byte{4, 0, 0, 3, 0, 0, 4, 1, 0, 5, 0, 0, 3, 0, 0, 6, 0, 0, 6, 0, 0, 5, 0, 0})                                                                                            // rw upgrade, downgrade
	f.Add([]byte("%7D%25\xff}"), []byte{4, 0, 0, 4, 1, 0, 3, 0, 0, 3, 1, 0, 6, 1, 0, 3, 0, 0, 5, 0, 0, 6, 0, 0})                                                                                           // rw upgrade blocked by another reader
	f.Add([]byte("\x00\x01\xfe\xff"), []byte{7, 0, 2, 7, 1, 2, 7, 2, 1, 9, 1, 1, 9, 1, 1, 9, 1, 2, 7, 2, 4, 9, 0, 0, 9, 0, 3})                                                                             // permits
	f.Add([]byte("\x80long{name}"), []byte{0, 0, 0x80, 1, 1, 0x80, 3, 0, 0x80, 7, 0, 0x82, 0, 0, 0, 2, 0, 0x80, 9, 1, 0x81})                                                                               // cancelled contexts
	f.Add(plain, []byte{1, 0, 0, 1, 0, 0, 1, 3, 0, 2, 3, 0, 2, 0, 0, 1, 3, 0, 2, 0, 0, 2, 3, 0})                                                                                                           // blocking lock where it cannot wait
	f.Add([]byte("fair}\xff\x80{x"), []byte{10, 0, 0, 10, 0, 0, 10, 1, 0, 11, 1, 0, 11, 0, 0, 10, 1, 0, 11, 0, 0, 11, 0, 0, 11, 1, 0, 2, 0, 0})                                                            // fair re-entry, foreign unlock
	f.Add([]byte("once{}"), []byte{12, 0, 1, 12, 1, 0x81, 12, 1, 0, 12, 0, 0, 12, 3, 1, 12, 3, 0})                                                                                                         // once: fail, cancelled, run, done
	f.Add([]byte("\x81v{\xff\xff}\x00"), []byte{16, 0, 1, 16, 1, 0x80, 16, 4, 0, 16, 0, 0, 16, 3, 1, 16, 5, 0})                                                                                            // oncevalue: fail, cancelled, run, value seen by the other Client
	f.Add([]byte("m{x}\xff\xffm{y}"), []byte{0, 3, 0, 17, 0, 0, 17, 0, 0, 17, 1, 0, 19, 0, 0, 2, 3, 0, 17, 1, 0, 19, 1, 0, 2, 0, 0, 19, 0, 0, 19, 0, 0, 17, 2, 0x80, 18, 2, 0})                            // multilock: re-entry over a held member, blocked, foreign and extra unlock
	f.Add([]byte("wg\x00}"), []byte{15, 0, 0, 13, 0, 2, 15, 1, 0, 14, 0, 0, 14, 1, 2, 13, 1, 0x81, 14, 0, 0, 15, 0, 0, 14, 0, 0})                                                                          // wait group
	f.Add([]byte("el{}\xff\xffe%"), []byte{23, 0, 0, 20, 0, 0, 20, 0, 0, 20, 1, 0, 23, 1, 0, 22, 1, 0, 22, 0, 0x80, 22, 0, 0, 22, 0, 0, 21, 1, 0, 20, 2, 0x80, 23, 2, 0x80, 23, 2, 0, 21, 3, 0, 21, 4, 0}) // election: no leader, re-campaign, blocked, foreign, cancelled and repeated resign, takeover
	f.Add([]byte("g{x}"), []byte{24, 0, 0, 24, 1, 0, 24, 2, 1, 24, 0, 0x80, 25, 1, 0, 24, 1, 0, 25, 0, 0x81, 24, 3, 1, 24, 4, 1, 25, 3, 1, 24, 5, 1})                                                      // group: run, shared result across Clients, cancelled, forget, run again
	f.Add([]byte("c%}"), []byte{27, 0, 0, 27, 1, 1, 27, 0, 0x80, 26, 0, 0x80, 26, 1, 1, 2, 0, 0, 26, 1, 0, 26, 2, 1, 2, 2, 0, 26, 0, 3, 0, 1, 0, 2, 0, 0, 26, 4, 1, 26, 3, 2})                             // cond: signals with no waiter, cancelled, held (wrong context), deadline, signalled, broadcast
	// Random seeds from a fixed source.
	r := rand.New(rand.NewPCG(8, 10))
	for range 6 {
		nb := make([]byte, r.IntN(12))
		for i := range nb {
			nb[i] = byte(r.IntN(256))
		}
		b := make([]byte, 3*40)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		f.Add(nb, b)
	}
	srv := startRedis(f)
	prefix := testPrefix()
	const lease = 5 * time.Second
	cs := [2]*dsync.Client{newDsync(f, srv.Addr, prefix, lease), newDsync(f, srv.Addr, prefix, lease)}
	var inputs, steps, failed atomic.Int64
	f.Cleanup(func() {
		addRow(reportRow{Scenario: "k fuzz: operations against a model", Primitive: fuzzRanList(),
			Size:   fmt.Sprintf("%d inputs (the seed corpus), %d steps", inputs.Load(), steps.Load()),
			Faults: "random owners, counts, cancelled contexts, invalid arguments, odd names", NoCounts: true, Leaked: -1, RecoveryNote: "—", Failed: failed.Load() > 0,
			Check:   fmt.Sprintf("after every step Inspect equals the model and every call returns what the model says: %d inputs failed", failed.Load()),
			Command: "cd faults && GOWORK=off go test -race -count=1 -run FuzzOperations . (explore: -run '^$' -fuzz FuzzOperations -fuzztime 60s)"})
	})
	f.Fuzz(func(t *testing.T, names, ops []byte) {
		inputs.Add(1)
		t.Cleanup(func() {
			if t.Failed() {
				failed.Add(1)
			}
		})
		if len(ops) > 3*200 {
			ops = ops[:3*200]
		}
		seq := fuzzSeq.Add(1)
		e := &fuzzEnv{t: t, cs: cs, m: newFuzzModel()}
		// The steps that led to a failure, logged once rather than built
		// into every check's message.
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(e.history())
			}
		})
		parts := strings.SplitN(string(names), "\xff\xff", fuzzNames)
		for k := range fuzzNames {
			p := ""
			if k < len(parts) {
				p = parts[k]
			}
			e.names[k] = fuzzName(p, seq, k)
			e.vnames[k] = fuzzName(p, seq, fuzzNames+k)
		}
		for i, c := range cs {
			e.mls[i] = c.NewMultiLock(e.names[:])
		}
		for o := range fuzzOwners {
			e.ctxs[o] = dsync.WithOwner(context.Background())
			e.owners[o], _ = dsync.OwnerOf(e.ctxs[o])
		}
		for i := 0; i+2 < len(ops); i += 3 {
			e.step(ops[i], ops[i+1], ops[i+2])
			steps.Add(1)
		}
		e.cleanup()
	})
}

// fuzzName makes name k of input seq from the input's bytes p: p itself
// (braces, '%', binary bytes and all), made long (near MaxNameLen) when
// its first byte has the high bit set, then a suffix that keeps the names
// of every input apart.
func fuzzName(p string, seq int64, k int) string {
	suffix := fmt.Sprintf("#%d%c", seq, 'a'+k)
	if p != "" && p[0]&0x80 != 0 {
		p = strings.Repeat(p, (dsync.MaxNameLen-len(suffix))/len(p))
	}
	if len(p)+len(suffix) > dsync.MaxNameLen {
		p = p[:dsync.MaxNameLen-len(suffix)]
	}
	return p + suffix
}
