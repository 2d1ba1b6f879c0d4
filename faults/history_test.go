package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
)

// now is the timestamp of every recorded event. Holders run in several
// processes of one host, so it is the wall clock in nanoseconds; within one
// process Go reads it together with the monotonic clock, and no test runs
// long enough for an NTP step to matter.
func now() int64 { return time.Now().UnixNano() }

// An event is one operation on the mutex under test: an acquisition
// (call to return of LockContext) or the end of a hold (call to return of
// UnlockContext, or, for a hold that was lost, the moment its lock context
// was seen cancelled).
type event struct {
	Rel  bool   `json:"rel"`
	Who  int    `json:"who"`
	Call int64  `json:"call"`
	Ret  int64  `json:"ret"`
	Tok  uint64 `json:"tok"`
	Lost bool   `json:"lost"`
}

type history struct {
	mu sync.Mutex
	ev []event
}

func (h *history) add(e event) {
	h.mu.Lock()
	h.ev = append(h.ev, e)
	h.mu.Unlock()
}

type mutexIn struct {
	rel bool
	who int
}

// mutexModel is a lock with one holder: an acquire is legal only when the
// lock is free, a release only by the holder. A history that porcupine can
// linearize against it has no two overlapping holds.
var mutexModel = porcupine.Model{
	Init: func() interface{} { return -1 },
	Step: func(state, input, _ interface{}) (bool, interface{}) {
		s, in := state.(int), input.(mutexIn)
		if !in.rel {
			return s == -1, in.who
		}
		return s == in.who, -1
	},
	DescribeOperation: func(input, _ interface{}) string {
		in := input.(mutexIn)
		if in.rel {
			return fmt.Sprintf("release(%d)", in.who)
		}
		return fmt.Sprintf("acquire(%d)", in.who)
	},
}

// check verifies the history: porcupine finds it linearizable against the
// mutex model, and the tokens of successive holds strictly increase.
func (h *history) check(t testing.TB) (holds int) {
	t.Helper()
	h.mu.Lock()
	ev := append([]event(nil), h.ev...)
	h.mu.Unlock()
	ops := make([]porcupine.Operation, 0, len(ev))
	for _, e := range ev {
		ops = append(ops, porcupine.Operation{ClientId: e.Who, Input: mutexIn{rel: e.Rel, who: e.Who}, Call: e.Call, Return: e.Ret})
		if !e.Rel {
			holds++
		}
	}
	switch res := porcupine.CheckOperationsTimeout(mutexModel, ops, 60*time.Second); res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Errorf("porcupine: check of %d operations timed out", len(ops))
	default:
		t.Errorf("porcupine: history of %d operations is not linearizable: two holders overlapped", len(ops))
	}
	// Tokens in the order the holds were granted (acquire returns are
	// ordered by the model, so sort by return).
	acq := make([]event, 0, holds)
	for _, e := range ev {
		if !e.Rel {
			acq = append(acq, e)
		}
	}
	sortBy(acq, func(a, b event) bool { return a.Ret < b.Ret })
	for i := 1; i < len(acq); i++ {
		assert.Greater(t, acq[i].Tok, acq[i-1].Tok, "token: not strictly increasing")
	}
	return holds
}

func sortBy[T any](s []T, less func(a, b T) bool) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && less(s[j], s[j-1]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// resource is what a critical section writes to: a fenced store and an
// unfenced register. Children reach it over HTTP (see serve).
type resource interface {
	fence(tok uint64) bool // write with a fencing token; false: rejected
	get() int64            // the register's value
	put(v int64)           // write the register
}

// store is the resource itself, in the test process.
type store struct {
	mu       sync.Mutex
	max      uint64 // largest token seen
	accepted int
	rejected int
	reg      int64
	puts     int64
}

func (s *store) fence(tok uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The holder of the largest token may write again; any smaller token
	// belongs to a holder that was superseded.
	if tok < s.max {
		s.rejected++
		return false
	}
	s.max = tok
	s.accepted++
	return true
}

func (s *store) get() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg
}

func (s *store) put(v int64) {
	s.mu.Lock()
	s.reg = v
	s.puts++
	s.mu.Unlock()
}

// lostUpdates is how many register increments were overwritten: each
// critical section adds one, so any shortfall is an overlap.
func (s *store) lostUpdates() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts - s.reg
}

func (s *store) counts() (accepted, rejected int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, s.rejected
}

// serve exposes s on a loopback HTTP server for child processes.
func (s *store) serve(t testing.TB) string {
	mux := http.NewServeMux()
	mux.HandleFunc("/fence", func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strconv.ParseUint(r.FormValue("tok"), 10, 64)
		if s.fence(tok) {
			fmt.Fprint(w, "ok")
		} else {
			fmt.Fprint(w, "stale")
		}
	})
	mux.HandleFunc("/reg", func(w http.ResponseWriter, r *http.Request) {
		if v := r.FormValue("v"); v != "" {
			n, _ := strconv.ParseInt(v, 10, 64)
			s.put(n)
		}
		fmt.Fprint(w, s.get())
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// remote is a store reached over HTTP.
type remote struct {
	url string
	hc  *http.Client
}

func (r remote) call(q string) string {
	resp, err := r.hc.Get(r.url + q)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var b [32]byte
	n, _ := resp.Body.Read(b[:])
	return string(b[:n])
}

func (r remote) fence(tok uint64) bool {
	return r.call("/fence?tok="+strconv.FormatUint(tok, 10)) == "ok"
}
func (r remote) get() int64 {
	n, _ := strconv.ParseInt(r.call("/reg"), 10, 64)
	return n
}
func (r remote) put(v int64) { r.call("/reg?v=" + strconv.FormatInt(v, 10)) }

// tally counts what one worker saw.
type tally struct {
	holds, timeouts, errs, lost atomic.Int64
}

// work runs critical sections on m until until: acquire (bounded by
// acquireWait), write the fenced store, increment the register with a
// pause of 0-5 ms between read and write, release. Every hold is
// recorded; a hold that was lost ends in the history when its lock
// context was cancelled.
func work(ctx context.Context, m *dsync.Mutex, who int, res resource, rec func(event), until time.Time, acquireWait time.Duration, tl *tally) {
	for time.Now().Before(until) && ctx.Err() == nil {
		actx, cancel := context.WithTimeout(dsync.WithOwner(ctx), acquireWait)
		call := now()
		lctx, err := m.LockContext(actx)
		ret := now()
		if err != nil {
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				tl.timeouts.Add(1)
			} else {
				tl.errs.Add(1)
				time.Sleep(10 * time.Millisecond) // back off a Redis error
			}
			continue
		}
		tl.holds.Add(1)
		tok, _ := dsync.FencingToken(lctx)
		var cancelledAt atomic.Int64
		stop := context.AfterFunc(lctx, func() { cancelledAt.Store(now()) })
		rec(event{Who: who, Call: call, Ret: ret, Tok: tok})
		if lctx.Err() == nil {
			res.fence(tok)
		}
		if lctx.Err() == nil {
			v := res.get()
			time.Sleep(time.Duration(rand.IntN(5001)) * time.Microsecond)
			res.put(v + 1)
		}
		rcall := now()
		_ = m.UnlockContext(lctx)
		rret := now()
		stop()
		lost := errors.Is(context.Cause(lctx), dsync.ErrLockLost)
		if at := cancelledAt.Load(); lost && at != 0 && at < rcall {
			// The hold ended when the lease clock ran out, not at Unlock.
			rcall, rret = at, at
			tl.lost.Add(1)
		}
		rec(event{Rel: true, Who: who, Call: rcall, Ret: rret, Tok: tok, Lost: lost})
		cancel()
	}
}
